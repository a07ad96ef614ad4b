// EngineHandle.loadLora / unloadLora: a PEFT adapter into (or out of) an engine slot between
// steps. The adapter's config was checked in TypeScript (workers/lora/); this reads its tensors.
#include <memory>
#include <string>

#include "convert.h"
#include "engine_handle.h"

namespace tandem::binding {

// loadLora(slot, {dir, rank, scale, targets}): reads the adapter's factors on a worker thread,
// then swaps it into the slot between steps. The config was checked by the caller
// (workers/lora/peft-adapter.ts); this checks the tensors. Resolves {numParameters}.
Napi::Value EngineHandle::loadLora(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto engine = require_open(env);
  if (info.Length() < 2 || !info[0].IsNumber() || !info[1].IsObject()) {
    throw make_error(env, "invalid_argument", "loadLora(slot: number, {dir, rank, scale, targets})");
  }
  const int32_t slot = info[0].As<Napi::Number>().Int32Value();
  Napi::Object o = info[1].As<Napi::Object>();
  if (!o.Get("dir").IsString() || !o.Get("rank").IsNumber() || !o.Get("scale").IsNumber() || !o.Get("targets").IsArray()) {
    throw make_error(env, "invalid_argument", "loadLora: {dir: string, rank: number, scale: number, targets: string[]}");
  }
  LoraSpec spec;
  spec.dir = o.Get("dir").As<Napi::String>().Utf8Value();
  spec.rank = o.Get("rank").As<Napi::Number>().Int32Value();
  spec.scale = o.Get("scale").As<Napi::Number>().FloatValue();
  Napi::Array targets = o.Get("targets").As<Napi::Array>();
  for (uint32_t i = 0; i < targets.Length(); ++i) {
    const std::string m = targets.Get(i).ToString().Utf8Value();
    bool found = false;
    for (int t = 0; t < kNumLoraTargets; ++t) {
      if (m == lora_target_module(static_cast<LoraTarget>(t))) {
        spec.targets.push_back(static_cast<LoraTarget>(t));
        found = true;
      }
    }
    if (!found) throw make_error(env, "invalid_argument", "loadLora: unsupported target module '" + m + "'");
  }
  if (engine->config().moe.enabled()) {
    // The model, not the backend, refuses: the caller's input, as the CPU backend's set_lora says.
    throw make_error(env, "invalid_argument", "LoRA adapters on a mixture-of-experts model (" + engine->config().architecture +
                                                  ") are not supported: adapters on experts are out of scope");
  }
  if (!engine->supports_lora()) {
    throw make_error(env, "unavailable", std::string("backend '") + engine->backend_name() + "' has no LoRA kernels");
  }
  class LoraWorker : public PromiseWorker {
   public:
    LoraWorker(Napi::Env env, std::shared_ptr<Engine> engine, int32_t slot, LoraSpec spec)
        : PromiseWorker(env), engine_(std::move(engine)), slot_(slot), spec_(std::move(spec)) {}

   protected:
    void run() override {
      auto adapter = engine_->read_lora(spec_);
      params_ = adapter->num_parameters;
      engine_->set_lora(slot_, std::move(adapter));
    }
    Napi::Value result(Napi::Env env) override {
      Napi::Object r = Napi::Object::New(env);
      r.Set("numParameters", Napi::Number::New(env, static_cast<double>(params_)));
      return r;
    }

   private:
    std::shared_ptr<Engine> engine_;
    int32_t slot_;
    LoraSpec spec_;
    size_t params_ = 0;
  };
  auto* worker = new LoraWorker(env, engine, slot, std::move(spec));
  return worker->start();
}

// unloadLora(slot): empties the slot after any running step (a worker thread waits for it).
Napi::Value EngineHandle::unloadLora(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto engine = require_open(env);
  if (info.Length() < 1 || !info[0].IsNumber()) throw make_error(env, "invalid_argument", "unloadLora(slot: number)");
  const int32_t slot = info[0].As<Napi::Number>().Int32Value();
  return queue_void(env, [engine, slot] { engine->set_lora(slot, nullptr); }, env.Undefined());
}

}  // namespace tandem::binding

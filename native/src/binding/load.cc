// loadEngine and describeKvLayout: the options object becomes EngineOptions (convert.cc); a
// load runs on a worker thread and resolves to an EngineHandle.
#include "exports.h"

#include "convert.h"
#include "engine_handle.h"

namespace tandem::binding {

Napi::Value load_engine(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 1 || !info[0].IsObject()) {
    throw make_error(env, "invalid_argument", "loadEngine(options) needs an options object");
  }
  Napi::Object o = info[0].As<Napi::Object>();
  EngineOptions opts;
  read_engine_options(env, o, opts);
  Napi::Value pool = o.Get("kvPool");
  if (!pool.IsUndefined() && !pool.IsArrayBuffer()) {
    throw make_error(env, "invalid_argument", "loadEngine: kvPool must be an ArrayBuffer");
  }
  if (pool.IsArrayBuffer()) {
    opts.backend.kv_pool = pool.As<Napi::ArrayBuffer>().Data();
    opts.backend.kv_pool_bytes = pool.As<Napi::ArrayBuffer>().ByteLength();
  }

  class LoadWorker : public PromiseWorker {
   public:
    // The pool's ArrayBuffer is referenced from here to the handle, so it cannot be
    // collected while the load runs on a worker thread.
    LoadWorker(Napi::Env env, EngineOptions opts, Napi::Value pool) : PromiseWorker(env), opts_(std::move(opts)) {
      if (pool.IsArrayBuffer()) pool_ = Napi::Persistent(pool.As<Napi::ArrayBuffer>());
    }

   protected:
    void run() override { engine_ = std::shared_ptr<Engine>(Engine::load(opts_).release()); }
    Napi::Value result(Napi::Env env) override {
      AddonData* data = env.GetInstanceData<AddonData>();
      auto ext = Napi::External<std::shared_ptr<Engine>>::New(env, &engine_);
      if (pool_.IsEmpty()) return data->engine_ctor.New({ext});
      return data->engine_ctor.New({ext, pool_.Value()});
    }

   private:
    EngineOptions opts_;
    std::shared_ptr<Engine> engine_;
    Napi::Reference<Napi::ArrayBuffer> pool_;
  };

  auto* worker = new LoadWorker(env, std::move(opts), pool);
  return worker->start();
}

// Synchronous and cheap (reads config.json only): the pool size a load with these options
// would use, so a transfer agent can allocate the pool before the weights load.
Napi::Value describe_kv_layout(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 1 || !info[0].IsObject()) {
    throw make_error(env, "invalid_argument", "describeKvLayout(options) needs an options object");
  }
  EngineOptions opts;
  read_engine_options(env, info[0].As<Napi::Object>(), opts);
  const KvLayout kv = rethrow_native(env, [&] { return Engine::describe_kv_layout(opts); });
  Napi::Object o = Napi::Object::New(env);
  o.Set("numBlocks", Napi::Number::New(env, static_cast<double>(kv.num_blocks)));
  o.Set("blockSize", Napi::Number::New(env, static_cast<double>(kv.block_size)));
  o.Set("numLayers", Napi::Number::New(env, static_cast<double>(kv.num_layers)));
  o.Set("numKvHeads", Napi::Number::New(env, static_cast<double>(kv.num_kv_heads)));
  o.Set("headDim", Napi::Number::New(env, static_cast<double>(kv.head_dim)));
  o.Set("kvBytesPerToken", Napi::Number::New(env, static_cast<double>(kv.bytes_per_token())));
  o.Set("kvBytesPerBlock", Napi::Number::New(env, static_cast<double>(kv.bytes_per_block())));
  o.Set("kvLayout", kKvLayoutName);
  o.Set("kvDtype", kv_dtype_name(kv.elem_bytes));
  return o;
}

}  // namespace tandem::binding

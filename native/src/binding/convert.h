// What every part of the binding shares: NativeError → a JS Error with `code`, vectors →
// typed arrays, the argument readers (Int32Array, Uint8Array, layer ranges, KV layouts, the
// loadEngine options), and PromiseWorker, the AsyncWorker that settles a Promise.
#pragma once

#include <napi.h>

#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "../core/engine.h"
#include "../core/error.h"

namespace tandem::binding {

Napi::Error make_error(Napi::Env env, const std::string& code, const std::string& message);

/** Runs fn, turning a NativeError it throws into the JS error with its code (synchronous calls). */
template <typename Fn>
auto rethrow_native(Napi::Env env, Fn&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const NativeError& e) {
    throw make_error(env, e.code_name(), e.what());
  }
}

/** A copy of v as a Float32Array (T = float) or Int32Array (T = int32_t). */
template <typename T, typename Vec>
Napi::Value to_typed(Napi::Env env, const Vec& v) {
  Napi::ArrayBuffer buf = Napi::ArrayBuffer::New(env, v.size() * sizeof(T));
  if (!v.empty()) std::memcpy(buf.Data(), v.data(), v.size() * sizeof(T));
  if constexpr (std::is_same_v<T, float>) {
    return Napi::Float32Array::New(env, v.size(), buf, 0);
  } else {
    return Napi::Int32Array::New(env, v.size(), buf, 0);
  }
}

/** A copy of an Int32Array argument; `what` names it in the error. */
std::vector<int32_t> int32s(Napi::Env env, Napi::Value v, const char* what);
Napi::Uint8Array bytes_arg(Napi::Env env, Napi::Value v, const char* what);
/** [l0, l1], or {0, -1} (every layer) when absent. */
std::pair<int, int> layers_arg(Napi::Env env, Napi::Value v);
/** { blockSize, dtype: 'f32' | 'bf16', numBlocks?, numLayers?, numKvHeads?, headDim? }; missing fields: this engine's. */
KvLayout layout_arg(Napi::Env env, const Engine& engine, Napi::Value v);
/** loadEngine's and describeKvLayout's options object. */
void read_engine_options(Napi::Env env, Napi::Object o, EngineOptions& opts);
/** loadEngine's `speculative` object (native/lib/binding.ts LoadSpeculativeOptions) as a DraftConfig. */
spec::DraftConfig read_draft_config(Napi::Env env, Napi::Object speculative);

// Runs run() on a libuv worker thread and settles a Promise with result(), translating
// NativeError into a rejection whose `code` is the error's.
class PromiseWorker : public Napi::AsyncWorker {
 public:
  explicit PromiseWorker(Napi::Env env) : Napi::AsyncWorker(env), deferred_(Napi::Promise::Deferred::New(env)) {}
  Napi::Promise promise() { return deferred_.Promise(); }
  /** Queues the worker (which deletes itself when settled) and returns its Promise. */
  Napi::Promise start() {
    Napi::Promise p = promise();
    Queue();
    return p;
  }

 protected:
  virtual void run() = 0;
  virtual Napi::Value result(Napi::Env env) = 0;

  void Execute() override;
  void OnOK() override;

 private:
  Napi::Promise::Deferred deferred_;
  bool failed_ = false;
  std::string code_;
  std::string message_;
};

// A PromiseWorker for work that resolves to undefined; `keep` (an object, e.g. the typed array
// the work reads or writes) stays referenced until it settles.
class VoidWorker : public PromiseWorker {
 public:
  VoidWorker(Napi::Env env, std::function<void()> fn, Napi::Value keep);

 protected:
  void run() override { fn_(); }
  Napi::Value result(Napi::Env env) override { return env.Undefined(); }

 private:
  std::function<void()> fn_;
  Napi::ObjectReference keep_;
};

/** Queues fn on a worker thread; the Promise resolves to undefined. */
Napi::Value queue_void(Napi::Env env, std::function<void()> fn, Napi::Value keep);

// An engine call with a copied input on a worker thread (step, embed): `run` computes the
// output there, `result` converts it on the JS thread. The shared_ptr keeps the engine alive
// past close() until the call settles; `keep` (an object the call reads while it runs, e.g.
// embed's cancel flag) stays referenced until then too.
template <typename In, typename Out>
class EngineCallWorker : public PromiseWorker {
 public:
  using Run = Out (*)(Engine&, const In&);
  using Result = Napi::Value (*)(Napi::Env, const In&, const Out&);
  EngineCallWorker(Napi::Env env, std::shared_ptr<Engine> engine, std::shared_ptr<In> input, Run run, Result result, Napi::Value keep = Napi::Value())
      : PromiseWorker(env), engine_(std::move(engine)), input_(std::move(input)), run_(run), result_(result) {
    if (!keep.IsEmpty() && keep.IsObject()) keep_ = Napi::Persistent(keep.As<Napi::Object>());
  }

 protected:
  void run() override { output_ = run_(*engine_, *input_); }
  Napi::Value result(Napi::Env env) override { return result_(env, *input_, output_); }

 private:
  std::shared_ptr<Engine> engine_;
  std::shared_ptr<In> input_;
  Run run_;
  Result result_;
  Out output_;
  Napi::ObjectReference keep_;
};

template <typename In, typename Out>
Napi::Value queue_engine_call(Napi::Env env, std::shared_ptr<Engine> engine, std::shared_ptr<In> input,
                              typename EngineCallWorker<In, Out>::Run run, typename EngineCallWorker<In, Out>::Result result,
                              Napi::Value keep = Napi::Value()) {
  return (new EngineCallWorker<In, Out>(env, std::move(engine), std::move(input), run, result, keep))->start();
}

}  // namespace tandem::binding

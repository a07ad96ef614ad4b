// EngineHandle.embed: pooled hidden states of whole sequences (Engine::embed, core/embedding.cc).
#include <memory>

#include "convert.h"
#include "engine_handle.h"

namespace tandem::binding {

// embed(tokens: Int32Array, lengths: Int32Array, pooling: 0 last | 1 mean, normalize: bool,
//       cancel?: Int32Array over a SharedArrayBuffer)
//   -> Promise<Float32Array> of [lengths.length][hiddenSize] (Engine::embed, embedding.cc).
// A non-zero cancel[0] (Atomics.store from JavaScript) stops the call before its next forward
// pass: the promise rejects with code 'cancelled'.
Napi::Value EngineHandle::embed(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto engine = require_open(env);
  if (info.Length() < 4 || !info[0].IsTypedArray() || !info[1].IsTypedArray() || !info[2].IsNumber() ||
      info[0].As<Napi::TypedArray>().TypedArrayType() != napi_int32_array ||
      info[1].As<Napi::TypedArray>().TypedArrayType() != napi_int32_array) {
    throw make_error(env, "invalid_argument", "embed(tokens: Int32Array, lengths: Int32Array, pooling: number, normalize: boolean)");
  }
  auto input = std::make_shared<EmbedInput>();
  auto tokens = info[0].As<Napi::Int32Array>();
  auto lengths = info[1].As<Napi::Int32Array>();
  input->tokens.assign(tokens.Data(), tokens.Data() + tokens.ElementLength());
  input->lengths.assign(lengths.Data(), lengths.Data() + lengths.ElementLength());
  const int32_t pooling = info[2].As<Napi::Number>().Int32Value();
  if (pooling != 0 && pooling != 1) throw make_error(env, "invalid_argument", "embed: pooling must be 0 (last) or 1 (mean)");
  input->pooling = pooling == 0 ? Pooling::kLast : Pooling::kMean;
  input->normalize = info[3].ToBoolean().Value();
  Napi::Value cancel;
  if (info.Length() > 4 && !info[4].IsUndefined()) {
    if (!info[4].IsTypedArray() || info[4].As<Napi::TypedArray>().TypedArrayType() != napi_int32_array ||
        info[4].As<Napi::Int32Array>().ElementLength() < 1) {
      throw make_error(env, "invalid_argument", "embed: cancel must be an Int32Array (over a SharedArrayBuffer)");
    }
    cancel = info[4];
    // Shared memory does not move, and the worker keeps the array referenced until it settles;
    // the engine thread only reads the flag, atomically, between passes.
    int32_t* flag = info[4].As<Napi::Int32Array>().Data();
    input->cancelled = [flag] { return __atomic_load_n(flag, __ATOMIC_ACQUIRE) != 0; };
  }

  return queue_engine_call<EmbedInput, EmbedOutput>(
      env, engine, input, [](Engine& e, const EmbedInput& in) { return e.embed(in); },
      [](Napi::Env env, const EmbedInput&, const EmbedOutput& out) { return to_typed<float>(env, out.vectors); }, cancel);
}

}  // namespace tandem::binding

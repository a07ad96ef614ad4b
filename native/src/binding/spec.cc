// EngineHandle.draftBegin / draftEnd: speculative decoding's drafter (native/src/spec/). Both
// only queue: the step thread applies them before it next drafts (Drafter's threading rule).
#include "convert.h"
#include "engine_handle.h"

namespace tandem::binding {

// draftBegin(key, tokens: Int32Array): a sequence's tokens so far (prompt and prior outputs).
Napi::Value EngineHandle::draftBegin(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto engine = require_open(env);
  if (engine->drafter() == nullptr) throw make_error(env, "unavailable", "draftBegin: the engine was loaded without speculative decoding");
  if (info.Length() < 2 || !info[0].IsNumber() || !info[1].IsTypedArray() ||
      info[1].As<Napi::TypedArray>().TypedArrayType() != napi_int32_array) {
    throw make_error(env, "invalid_argument", "draftBegin(key: number, tokens: Int32Array)");
  }
  auto tokens = info[1].As<Napi::Int32Array>();
  engine->drafter()->begin(info[0].As<Napi::Number>().Int64Value(), tokens.Data(), static_cast<int32_t>(tokens.ElementLength()));
  return env.Undefined();
}

// draftEnd(key, finished?): the drafter drops the sequence (a completed one may feed shared state).
Napi::Value EngineHandle::draftEnd(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!engine_ || engine_->drafter() == nullptr) return env.Undefined();
  if (info.Length() < 1 || !info[0].IsNumber()) throw make_error(env, "invalid_argument", "draftEnd(key: number, finished?: boolean)");
  engine_->drafter()->end(info[0].As<Napi::Number>().Int64Value(), info.Length() > 1 && info[1].ToBoolean().Value());
  return env.Undefined();
}

}  // namespace tandem::binding

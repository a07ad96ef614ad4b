// N-API binding of the native engine: converts arguments and queues work, nothing more; the
// logic lives in the C++ classes the test binary drives. loadEngine and step run on libuv
// worker threads (PromiseWorker, convert.h) and settle Promises; errors carry the NativeError
// code as `err.code`. This file registers the module; each area is its own file (README.md).
#include <napi.h>

#include "../core/kv_layout.h"
#include "engine_handle.h"
#include "exports.h"

namespace tandem::binding {
namespace {

Napi::Object init(Napi::Env env, Napi::Object exports) {
  auto* data = new AddonData();
  data->engine_ctor = Napi::Persistent(EngineHandle::define(env));
  env.SetInstanceData<AddonData>(data);
  exports.Set("loadEngine", Napi::Function::New(env, load_engine, "loadEngine"));
  exports.Set("backends", Napi::Function::New(env, backends, "backends"));
  exports.Set("backendStatus", Napi::Function::New(env, backend_status, "backendStatus"));
  exports.Set("describeKvLayout", Napi::Function::New(env, describe_kv_layout, "describeKvLayout"));
  exports.Set("kvLayout", Napi::String::New(env, kKvLayoutName));
  return exports;
}

}  // namespace
}  // namespace tandem::binding

static Napi::Object InitTandemNative(Napi::Env env, Napi::Object exports) { return tandem::binding::init(env, exports); }

NODE_API_MODULE(tandem_native, InitTandemNative)

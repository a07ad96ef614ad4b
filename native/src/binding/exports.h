// The module's free functions (exports of tandem_native.node besides EngineHandle).
#pragma once

#include <napi.h>

namespace tandem::binding {

/** loadEngine(options): Promise<EngineHandle>; options.kvPool loads into a caller's ArrayBuffer. */
Napi::Value load_engine(const Napi::CallbackInfo& info);
/** describeKvLayout(options): the pool a load with these options would use (config.json only). */
Napi::Value describe_kv_layout(const Napi::CallbackInfo& info);
/** backends(): the names of this build's backends. */
Napi::Value backends(const Napi::CallbackInfo& info);
/** backendStatus(): every backend of this build with whether it is available here, and why not. */
Napi::Value backend_status(const Napi::CallbackInfo& info);

}  // namespace tandem::binding

// backends and backendStatus: which backends this build has, and whether each can run here.
#include "exports.h"

#include "../core/backend.h"

namespace tandem::binding {

Napi::Value backends(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto names = available_backends();
  Napi::Array out = Napi::Array::New(env, names.size());
  for (size_t i = 0; i < names.size(); ++i) out.Set(static_cast<uint32_t>(i), names[i]);
  return out;
}

// Every backend of this build: { name, available, reason?, detail? }. Probes the CUDA driver
// (cheap; no allocation) so `cuda` is reported available only with a driver and a device.
Napi::Value backend_status(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto all = tandem::backend_status();
  Napi::Array out = Napi::Array::New(env, all.size());
  for (size_t i = 0; i < all.size(); ++i) {
    Napi::Object o = Napi::Object::New(env);
    o.Set("name", all[i].name);
    o.Set("available", Napi::Boolean::New(env, all[i].available));
    if (!all[i].reason.empty()) o.Set("reason", all[i].reason);
    if (!all[i].detail.empty()) o.Set("detail", all[i].detail);
    if (!all[i].fp8.empty()) o.Set("fp8", all[i].fp8);
    out.Set(static_cast<uint32_t>(i), o);
  }
  return out;
}

}  // namespace tandem::binding

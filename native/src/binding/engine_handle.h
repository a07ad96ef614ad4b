// EngineHandle: the JS object loadEngine resolves to. It holds the Engine through a
// shared_ptr, so a step in flight keeps the engine alive past close(). Its methods are
// defined by area:
//   engine_handle.cc  define, info, close
//   step.cc           step, supplyMasks (sampling inputs, deferred masks)
//   embed.cc          embed
//   lora.cc           loadLora, unloadLora
//   kv.cc             kvPool, adoptKvPool, KV block movement, peers, layerProgress
//   spec.cc           draftBegin, draftEnd (speculative decoding's drafter)
#pragma once

#include <napi.h>

#include <memory>

#include "../core/engine.h"

namespace tandem::binding {

/** Per-environment data: the EngineHandle constructor that loadEngine instantiates. */
struct AddonData {
  Napi::FunctionReference engine_ctor;
};

class EngineHandle : public Napi::ObjectWrap<EngineHandle> {
 public:
  static Napi::Function define(Napi::Env env);
  /** (External<shared_ptr<Engine>>, pool?: ArrayBuffer): only loadEngine constructs one. */
  explicit EngineHandle(const Napi::CallbackInfo& info);

 private:
  std::shared_ptr<Engine> require_open(Napi::Env env);

  Napi::Value info(const Napi::CallbackInfo& info);
  Napi::Value close(const Napi::CallbackInfo& info);
  // step.cc
  Napi::Value step(const Napi::CallbackInfo& info);
  Napi::Value supplyMasks(const Napi::CallbackInfo& info);
  // embed.cc
  Napi::Value embed(const Napi::CallbackInfo& info);
  // lora.cc
  Napi::Value loadLora(const Napi::CallbackInfo& info);
  Napi::Value unloadLora(const Napi::CallbackInfo& info);
  // kv.cc
  Napi::Value kvPool(const Napi::CallbackInfo& info);
  Napi::Value adoptKvPool(const Napi::CallbackInfo& info);
  Napi::Value kvReadBlocks(const Napi::CallbackInfo& info);
  Napi::Value kvWriteBlocks(const Napi::CallbackInfo& info);
  Napi::Value kvExportHandle(const Napi::CallbackInfo& info);
  Napi::Value kvOpenPeer(const Napi::CallbackInfo& info);
  Napi::Value kvCopyFromPeer(const Napi::CallbackInfo& info);
  Napi::Value kvClosePeer(const Napi::CallbackInfo& info);
  Napi::Value layerProgress(const Napi::CallbackInfo& info);
  // spec.cc
  Napi::Value draftBegin(const Napi::CallbackInfo& info);
  Napi::Value draftEnd(const Napi::CallbackInfo& info);

  std::shared_ptr<Engine> engine_;
  // The step in flight that waits for supplyMasks() (deferMasks), if any.
  std::shared_ptr<DeferredMasks> pending_masks_;
  // Keeps a caller-owned pool's ArrayBuffer referenced while the handle lives.
  Napi::Reference<Napi::ArrayBuffer> pool_;
};

}  // namespace tandem::binding

// EngineHandle's KV pool and KV movement (issue 24): the pool as an ArrayBuffer (host pools),
// adopting a transfer agent's allocation, block copies to and from host buffers, export
// handles and peer pools, and the layer-progress view. Copies run on libuv worker threads and
// settle Promises; the typed arrays they read or write stay referenced until then.
#include <cstring>
#include <memory>
#include <string>

#include "convert.h"
#include "engine_handle.h"

namespace tandem::binding {

// The KV pool as an external ArrayBuffer over the engine's own memory (no copy), so a UCX
// agent can register it and peers can read blocks in place. The buffer holds a reference
// to the engine: the pool outlives close() until the buffer is collected, so a registered
// region never points at freed memory.
// A caller-owned pool (loadEngine's kvPool, adoptKvPool) comes back as that same
// ArrayBuffer: its owner (the UCX agent) decides its lifetime, not the engine.
Napi::Value EngineHandle::kvPool(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto engine = require_open(env);
  if (!pool_.IsEmpty()) return pool_.Value();
  if (!engine->kv_pool_on_host()) {
    throw make_error(env, "invalid_argument",
                     std::string("kvPool: backend '") + engine->backend_name() + "' keeps its KV pool in device memory");
  }
  auto* keep = new std::shared_ptr<Engine>(engine);
  return Napi::ArrayBuffer::New(
      env, engine->kv_pool_base(), engine->kv_pool_bytes(),
      [](Napi::Env, void*, std::shared_ptr<Engine>* hint) { delete hint; }, keep);
}

// Synchronous: a worker that loaded its engine first can still move the pool into a
// transfer agent's allocation before the first step. Waits for a running step (C++ mutex).
Napi::Value EngineHandle::adoptKvPool(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto engine = require_open(env);
  if (info.Length() < 1 || !info[0].IsArrayBuffer()) {
    throw make_error(env, "invalid_argument", "adoptKvPool(buffer: ArrayBuffer)");
  }
  Napi::ArrayBuffer buf = info[0].As<Napi::ArrayBuffer>();
  rethrow_native(env, [&] { engine->adopt_kv_pool(buf.Data(), buf.ByteLength()); });
  pool_ = Napi::Persistent(buf);
  return env.Undefined();
}

// kvReadBlocks(ids: Int32Array, dst: Uint8Array, layers?: [l0, l1]): Promise<void>
Napi::Value EngineHandle::kvReadBlocks(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto engine = require_open(env);
  auto ids = int32s(env, info[0], "kvReadBlocks: ids");
  Napi::Uint8Array dst = bytes_arg(env, info[1], "kvReadBlocks: dst");
  const auto [l0, l1] = layers_arg(env, info[2]);
  uint8_t* data = dst.Data();
  const size_t bytes = dst.ByteLength();
  return queue_void(
      env, [engine, ids = std::move(ids), data, bytes, l0 = l0, l1 = l1] { engine->kv_read_blocks(ids, data, bytes, l0, l1); },
      dst);
}

// kvWriteBlocks(ids: Int32Array, src: Uint8Array, srcLayout?: KvLayout, layers?: [l0, l1], srcFirstToken?: number): Promise<void>
Napi::Value EngineHandle::kvWriteBlocks(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto engine = require_open(env);
  auto ids = int32s(env, info[0], "kvWriteBlocks: ids");
  Napi::Uint8Array src = bytes_arg(env, info[1], "kvWriteBlocks: src");
  const KvLayout layout = layout_arg(env, *engine, info[2]);
  const auto [l0, l1] = layers_arg(env, info[3]);
  const int64_t first = info[4].IsNumber() ? static_cast<int64_t>(info[4].As<Napi::Number>().DoubleValue()) : 0;
  const uint8_t* data = src.Data();
  const size_t bytes = src.ByteLength();
  return queue_void(env,
                    [engine, ids = std::move(ids), data, bytes, layout, l0 = l0, l1 = l1, first] {
                      engine->kv_write_blocks(ids, data, bytes, layout, l0, l1, first);
                    },
                    src);
}

// kvExportHandle(): Uint8Array | null. Synchronous; waits for a running step (the SIMT pool
// moves into shared memory on the first call), so call it once before serving.
Napi::Value EngineHandle::kvExportHandle(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto engine = require_open(env);
  const std::string h = rethrow_native(env, [&] { return engine->kv_export_handle(); });
  if (h.empty()) return env.Null();
  Napi::Uint8Array out = Napi::Uint8Array::New(env, h.size());
  std::memcpy(out.Data(), h.data(), h.size());
  return out;
}

// kvOpenPeer(handle: Uint8Array, peerLayout: KvLayout with numBlocks): number
Napi::Value EngineHandle::kvOpenPeer(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto engine = require_open(env);
  Napi::Uint8Array h = bytes_arg(env, info[0], "kvOpenPeer: handle");
  const KvLayout layout = layout_arg(env, *engine, info[1]);
  const int peer = rethrow_native(
      env, [&] { return engine->kv_open_peer(std::string(reinterpret_cast<const char*>(h.Data()), h.ByteLength()), layout); });
  return Napi::Number::New(env, peer);
}

// kvCopyFromPeer(peer: number, srcIds: Int32Array, dstIds: Int32Array, layers?: [l0, l1], srcFirstToken?: number): Promise<void>
Napi::Value EngineHandle::kvCopyFromPeer(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto engine = require_open(env);
  if (!info[0].IsNumber()) throw make_error(env, "invalid_argument", "kvCopyFromPeer: peer must be a number");
  const int peer = info[0].As<Napi::Number>().Int32Value();
  auto src = int32s(env, info[1], "kvCopyFromPeer: srcIds");
  auto dst = int32s(env, info[2], "kvCopyFromPeer: dstIds");
  const auto [l0, l1] = layers_arg(env, info[3]);
  const int64_t first = info[4].IsNumber() ? static_cast<int64_t>(info[4].As<Napi::Number>().DoubleValue()) : 0;
  return queue_void(env,
                    [engine, peer, src = std::move(src), dst = std::move(dst), l0 = l0, l1 = l1, first] {
                      engine->kv_copy_from_peer(peer, src, dst, l0, l1, first);
                    },
                    env.Undefined());
}

Napi::Value EngineHandle::kvClosePeer(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (engine_ && info[0].IsNumber()) engine_->kv_close_peer(info[0].As<Napi::Number>().Int32Value());
  return env.Undefined();
}

// layerProgress(): BigInt64Array [forwards begun, layers written by the latest], a live view
// of memory the backend writes (no copy; it holds a reference to the engine, like kvPool).
Napi::Value EngineHandle::layerProgress(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto engine = require_open(env);
  const int64_t* p = engine->layer_progress();
  if (p == nullptr) return env.Null();
  auto* keep = new std::shared_ptr<Engine>(engine);
  Napi::ArrayBuffer buf = Napi::ArrayBuffer::New(
      env, const_cast<int64_t*>(p), 2 * sizeof(int64_t), [](Napi::Env, void*, std::shared_ptr<Engine>* hint) { delete hint; }, keep);
  return Napi::BigInt64Array::New(env, 2, buf, 0);
}

}  // namespace tandem::binding

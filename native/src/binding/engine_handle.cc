#include "engine_handle.h"

#include "convert.h"

namespace tandem::binding {

Napi::Function EngineHandle::define(Napi::Env env) {
  return DefineClass(env, "NativeEngineHandle",
                     {InstanceMethod<&EngineHandle::info>("info"), InstanceMethod<&EngineHandle::step>("step"),
                      InstanceMethod<&EngineHandle::kvPool>("kvPool"),
                      InstanceMethod<&EngineHandle::adoptKvPool>("adoptKvPool"),
                      InstanceMethod<&EngineHandle::supplyMasks>("supplyMasks"),
                      InstanceMethod<&EngineHandle::embed>("embed"),
                      InstanceMethod<&EngineHandle::kvReadBlocks>("kvReadBlocks"),
                      InstanceMethod<&EngineHandle::kvWriteBlocks>("kvWriteBlocks"),
                      InstanceMethod<&EngineHandle::kvExportHandle>("kvExportHandle"),
                      InstanceMethod<&EngineHandle::kvOpenPeer>("kvOpenPeer"),
                      InstanceMethod<&EngineHandle::kvCopyFromPeer>("kvCopyFromPeer"),
                      InstanceMethod<&EngineHandle::kvClosePeer>("kvClosePeer"),
                      InstanceMethod<&EngineHandle::layerProgress>("layerProgress"),
                      InstanceMethod<&EngineHandle::loadLora>("loadLora"),
                      InstanceMethod<&EngineHandle::unloadLora>("unloadLora"),
                      InstanceMethod<&EngineHandle::draftBegin>("draftBegin"),
                      InstanceMethod<&EngineHandle::draftEnd>("draftEnd"),
                      InstanceMethod<&EngineHandle::close>("close")});
}

EngineHandle::EngineHandle(const Napi::CallbackInfo& info) : Napi::ObjectWrap<EngineHandle>(info) {
  if (info.Length() < 1 || !info[0].IsExternal()) {
    throw make_error(info.Env(), "invalid_argument", "use loadEngine() to create an engine");
  }
  auto* holder = info[0].As<Napi::External<std::shared_ptr<Engine>>>().Data();
  engine_ = *holder;
  if (info.Length() > 1 && info[1].IsArrayBuffer()) pool_ = Napi::Persistent(info[1].As<Napi::ArrayBuffer>());
}

std::shared_ptr<Engine> EngineHandle::require_open(Napi::Env env) {
  if (!engine_) throw make_error(env, "unavailable", "native engine is closed");
  return engine_;
}

Napi::Value EngineHandle::info(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto engine = require_open(env);
  const ModelConfig& c = engine->config();
  const KvLayout& kv = engine->kv_layout();
  Napi::Object o = Napi::Object::New(env);
  o.Set("architecture", c.architecture);
  o.Set("vocabSize", Napi::Number::New(env, static_cast<double>(c.vocab_size)));
  o.Set("hiddenSize", Napi::Number::New(env, static_cast<double>(c.hidden_size)));
  o.Set("numLayers", Napi::Number::New(env, static_cast<double>(c.num_layers)));
  o.Set("numHeads", Napi::Number::New(env, static_cast<double>(c.num_heads)));
  o.Set("numKvHeads", Napi::Number::New(env, static_cast<double>(c.num_kv_heads)));
  o.Set("headDim", Napi::Number::New(env, static_cast<double>(c.head_dim)));
  o.Set("maxPositionEmbeddings", Napi::Number::New(env, static_cast<double>(c.max_position_embeddings)));
  Napi::Array eos = Napi::Array::New(env, c.eos_token_ids.size());
  for (size_t i = 0; i < c.eos_token_ids.size(); ++i) eos.Set(static_cast<uint32_t>(i), static_cast<double>(c.eos_token_ids[i]));
  o.Set("eosTokenIds", eos);
  o.Set("kvBytesPerToken", Napi::Number::New(env, static_cast<double>(kv.bytes_per_token())));
  o.Set("kvBytesPerBlock", Napi::Number::New(env, static_cast<double>(kv.bytes_per_block())));
  o.Set("numBlocks", Napi::Number::New(env, static_cast<double>(kv.num_blocks)));
  o.Set("blockSize", Napi::Number::New(env, static_cast<double>(kv.block_size)));
  o.Set("kvLayout", kKvLayoutName);
  o.Set("kvPoolExternal", Napi::Boolean::New(env, engine->kv_pool_external()));
  o.Set("backend", engine->backend_name());
  o.Set("device", engine->backend_description());
  o.Set("supportsLora", Napi::Boolean::New(env, engine->supports_lora()));
  o.Set("kvPoolOnHost", Napi::Boolean::New(env, engine->kv_pool_on_host()));
  o.Set("kvDtype", kv_dtype_name(kv.elem_bytes));
  Napi::Array scales = Napi::Array::New(env, engine->kv_scales().size());
  for (size_t i = 0; i < engine->kv_scales().size(); ++i) scales.Set(static_cast<uint32_t>(i), static_cast<double>(engine->kv_scales()[i]));
  o.Set("kvScales", scales);
  o.Set("quantization", c.quant.describe());
  o.Set("threads", Napi::Number::New(env, engine->num_threads()));
  return o;
}

Napi::Value EngineHandle::close(const Napi::CallbackInfo& info) {
  if (pending_masks_) pending_masks_->supply({}, {});
  pending_masks_.reset();
  engine_.reset();
  pool_.Reset();
  return info.Env().Undefined();
}

}  // namespace tandem::binding

// N-API binding: converts arguments and queues work, nothing more. loadEngine and step run
// on libuv worker threads (Napi::AsyncWorker) and settle Promises; errors carry the
// NativeError code as `err.code`. A step keeps the Engine alive through a shared_ptr, so
// close() during a step frees the engine when that step finishes.
#include <napi.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <string>

#include "../core/engine.h"
#include "../core/error.h"

namespace tandem {
namespace {

constexpr int kSeqMetaStride = 11;
constexpr int kSamplingStride = 8;
constexpr int kSpecMetaStride = 3;  // native/lib/binding.ts SPEC_META_STRIDE

struct AddonData {
  Napi::FunctionReference engine_ctor;
};

Napi::Error make_error(Napi::Env env, const std::string& code, const std::string& message) {
  Napi::Error err = Napi::Error::New(env, message);
  err.Set("code", Napi::String::New(env, code));
  return err;
}

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

// Runs fn on a worker thread, translating NativeError into a rejected promise with a code.
class PromiseWorker : public Napi::AsyncWorker {
 public:
  explicit PromiseWorker(Napi::Env env) : Napi::AsyncWorker(env), deferred_(Napi::Promise::Deferred::New(env)) {}
  Napi::Promise promise() { return deferred_.Promise(); }

 protected:
  virtual void run() = 0;
  virtual Napi::Value result(Napi::Env env) = 0;

  void Execute() override {
    try {
      run();
    } catch (const NativeError& e) {
      failed_ = true;
      code_ = e.code_name();
      message_ = e.what();
    } catch (const std::bad_alloc&) {
      failed_ = true;
      code_ = "resource_exhausted";
      message_ = "out of host memory";
    } catch (const std::exception& e) {
      failed_ = true;
      code_ = "internal";
      message_ = e.what();
    }
  }
  void OnOK() override {
    Napi::Env env = Env();
    Napi::HandleScope scope(env);
    if (failed_) {
      deferred_.Reject(make_error(env, code_, message_).Value());
      return;
    }
    try {
      deferred_.Resolve(result(env));
    } catch (const Napi::Error& e) {
      deferred_.Reject(e.Value());
    }
  }

 private:
  Napi::Promise::Deferred deferred_;
  bool failed_ = false;
  std::string code_;
  std::string message_;
};

class EngineHandle : public Napi::ObjectWrap<EngineHandle> {
 public:
  static Napi::Function define(Napi::Env env) {
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

  explicit EngineHandle(const Napi::CallbackInfo& info) : Napi::ObjectWrap<EngineHandle>(info) {
    if (info.Length() < 1 || !info[0].IsExternal()) {
      throw make_error(info.Env(), "invalid_argument", "use loadEngine() to create an engine");
    }
    auto* holder = info[0].As<Napi::External<std::shared_ptr<Engine>>>().Data();
    engine_ = *holder;
    if (info.Length() > 1 && info[1].IsArrayBuffer()) pool_ = Napi::Persistent(info[1].As<Napi::ArrayBuffer>());
  }

 private:
  std::shared_ptr<Engine> require_open(Napi::Env env) {
    if (!engine_) throw make_error(env, "unavailable", "native engine is closed");
    return engine_;
  }

  Napi::Value info(const Napi::CallbackInfo& info) {
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
    o.Set("kvPoolOnHost", Napi::Boolean::New(env, engine->kv_pool_on_host()));
    o.Set("kvDtype", kv.elem_bytes == 2 ? "bf16" : "f32");
    o.Set("threads", Napi::Number::New(env, engine->num_threads()));
    return o;
  }

  Napi::Value step(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    auto engine = require_open(env);
    if (info.Length() < 5 || !info[0].IsTypedArray() || !info[1].IsTypedArray() || !info[2].IsTypedArray() ||
        !info[3].IsTypedArray() || !info[4].IsTypedArray()) {
      throw make_error(env, "invalid_argument",
                       "step(tokens: Int32Array, seqMeta: Int32Array, blockTables: Int32Array, history: "
                       "Int32Array, sampling: Float64Array, returnLogits?: boolean, biasIds?: Int32Array, "
                       "biasValues?: Float32Array, maskRows?: Int32Array, allowedMasks?: Uint32Array)");
    }
    auto tokens = info[0].As<Napi::Int32Array>();
    auto meta = info[1].As<Napi::Int32Array>();
    auto tables = info[2].As<Napi::Int32Array>();
    auto history = info[3].As<Napi::Int32Array>();
    auto sampling = info[4].As<Napi::Float64Array>();
    if (tokens.TypedArrayType() != napi_int32_array || meta.TypedArrayType() != napi_int32_array ||
        tables.TypedArrayType() != napi_int32_array || history.TypedArrayType() != napi_int32_array ||
        sampling.TypedArrayType() != napi_float64_array) {
      throw make_error(env, "invalid_argument", "step: wrong typed-array kinds");
    }
    const size_t num_seqs = meta.ElementLength() / kSeqMetaStride;
    if (meta.ElementLength() % kSeqMetaStride != 0 || sampling.ElementLength() != num_seqs * kSamplingStride) {
      throw make_error(env, "invalid_argument", "step: seqMeta/sampling lengths do not match");
    }
    // Copy on the JS thread: the caller may reuse its buffers as soon as step() returns.
    auto input = std::make_shared<StepInput>();
    input->tokens.assign(tokens.Data(), tokens.Data() + tokens.ElementLength());
    input->block_tables.assign(tables.Data(), tables.Data() + tables.ElementLength());
    input->history.assign(history.Data(), history.Data() + history.ElementLength());
    input->return_logits = info.Length() > 5 && info[5].ToBoolean().Value();
    if (info.Length() > 7 && !info[6].IsUndefined()) {
      if (!info[6].IsTypedArray() || !info[7].IsTypedArray() ||
          info[6].As<Napi::TypedArray>().TypedArrayType() != napi_int32_array ||
          info[7].As<Napi::TypedArray>().TypedArrayType() != napi_float32_array ||
          info[6].As<Napi::TypedArray>().ElementLength() != info[7].As<Napi::TypedArray>().ElementLength()) {
        throw make_error(env, "invalid_argument", "step: biasIds (Int32Array) and biasValues (Float32Array) must have equal lengths");
      }
      auto bias_ids = info[6].As<Napi::Int32Array>();
      auto bias_values = info[7].As<Napi::Float32Array>();
      input->bias_ids.assign(bias_ids.Data(), bias_ids.Data() + bias_ids.ElementLength());
      input->bias_values.assign(bias_values.Data(), bias_values.Data() + bias_values.ElementLength());
    }
    std::vector<int32_t> mask_rows;
    if (info.Length() > 9 && !info[8].IsUndefined()) {
      if (!info[8].IsTypedArray() || !info[9].IsTypedArray() ||
          info[8].As<Napi::TypedArray>().TypedArrayType() != napi_int32_array ||
          info[9].As<Napi::TypedArray>().TypedArrayType() != napi_uint32_array ||
          info[8].As<Napi::TypedArray>().ElementLength() != num_seqs) {
        throw make_error(env, "invalid_argument", "step: maskRows (Int32Array, one per sequence) and allowedMasks (Uint32Array) expected");
      }
      auto rows = info[8].As<Napi::Int32Array>();
      auto masks = info[9].As<Napi::Uint32Array>();
      mask_rows.assign(rows.Data(), rows.Data() + rows.ElementLength());
      input->allowed_masks.assign(masks.Data(), masks.Data() + masks.ElementLength());
    }
    // deferMasks: sampling waits for supplyMasks(), which the caller makes while the forward runs.
    if (info.Length() > 10 && info[10].ToBoolean().Value()) {
      input->deferred_masks = std::make_shared<DeferredMasks>();
      pending_masks_ = input->deferred_masks;
    }
    std::vector<int32_t> spec_meta;  // speculative decoding: [numDrafts, proposeDrafts, draftKey] per sequence
    if (info.Length() > 12 && !info[12].IsUndefined()) {
      if (!info[12].IsTypedArray() || info[12].As<Napi::TypedArray>().TypedArrayType() != napi_int32_array ||
          info[12].As<Napi::TypedArray>().ElementLength() != num_seqs * kSpecMetaStride) {
        throw make_error(env, "invalid_argument", "step: specMeta (Int32Array, 3 per sequence) expected");
      }
      auto m = info[12].As<Napi::Int32Array>();
      spec_meta.assign(m.Data(), m.Data() + m.ElementLength());
    }
    std::vector<int32_t> lora_slots;  // multi-LoRA: one adapter slot per sequence, -1 = base
    if (info.Length() > 11 && !info[11].IsUndefined()) {
      if (!info[11].IsTypedArray() || info[11].As<Napi::TypedArray>().TypedArrayType() != napi_int32_array ||
          info[11].As<Napi::TypedArray>().ElementLength() != num_seqs) {
        throw make_error(env, "invalid_argument", "step: loraSlots (Int32Array, one per sequence) expected");
      }
      auto slots = info[11].As<Napi::Int32Array>();
      lora_slots.assign(slots.Data(), slots.Data() + slots.ElementLength());
    }
    input->seqs.resize(num_seqs);
    int32_t token_offset = 0;
    for (size_t i = 0; i < num_seqs; ++i) {
      const int32_t* m = meta.Data() + i * kSeqMetaStride;
      const double* sp = sampling.Data() + i * kSamplingStride;
      SeqInput& s = input->seqs[i];
      s.token_offset = token_offset;
      s.num_tokens = m[0];
      token_offset += m[0];
      s.start_pos = m[1];
      s.block_offset = m[2];
      s.num_blocks = m[3];
      s.sample = m[4] != 0;
      s.num_top_logprobs = m[5];
      s.history_offset = m[6];
      s.history_len = m[7];
      s.num_prompt = m[8];
      s.bias_offset = m[9];
      s.bias_len = m[10];
      s.mask_row = mask_rows.empty() ? -1 : mask_rows[i];
      s.lora_slot = lora_slots.empty() ? -1 : lora_slots[i];
      if (!spec_meta.empty()) {
        s.num_drafts = spec_meta[i * kSpecMetaStride];
        s.propose_drafts = spec_meta[i * kSpecMetaStride + 1];
        s.draft_key = spec_meta[i * kSpecMetaStride + 2];
      }
      s.sampling.temperature = static_cast<float>(sp[0]);
      s.sampling.top_p = static_cast<float>(sp[1]);
      s.sampling.top_k = static_cast<int32_t>(sp[2]);
      s.sampling.min_p = static_cast<float>(sp[3]);
      s.sampling.presence_penalty = static_cast<float>(sp[4]);
      s.sampling.frequency_penalty = static_cast<float>(sp[5]);
      s.sampling.repetition_penalty = static_cast<float>(sp[6]);
      s.sampling.seed = static_cast<uint64_t>(sp[7]);
    }

    class StepWorker : public PromiseWorker {
     public:
      StepWorker(Napi::Env env, std::shared_ptr<Engine> engine, std::shared_ptr<StepInput> input)
          : PromiseWorker(env), engine_(std::move(engine)), input_(std::move(input)) {}

     protected:
      void run() override { output_ = engine_->step(*input_); }
      Napi::Value result(Napi::Env env) override {
        Napi::Object o = Napi::Object::New(env);
        o.Set("tokens", to_typed<int32_t>(env, output_.tokens));
        o.Set("logprobs", to_typed<float>(env, output_.logprobs));
        o.Set("topStride", Napi::Number::New(env, output_.top_stride));
        o.Set("topIds", to_typed<int32_t>(env, output_.top_ids));
        o.Set("topLogprobs", to_typed<float>(env, output_.top_logprobs));
        if (input_->return_logits) o.Set("logits", to_typed<float>(env, output_.logits));
        // Speculative decoding: tokens per sampled sequence, and the drafter's proposals.
        o.Set("emitted", to_typed<int32_t>(env, output_.emitted));
        if (!output_.draft_counts.empty()) {
          o.Set("draftCounts", to_typed<int32_t>(env, output_.draft_counts));
          o.Set("drafts", to_typed<int32_t>(env, output_.drafts));
          o.Set("draftScores", to_typed<float>(env, output_.draft_scores));
        }
        return o;
      }

     private:
      std::shared_ptr<Engine> engine_;
      std::shared_ptr<StepInput> input_;
      StepOutput output_;
    };

    auto* worker = new StepWorker(env, engine, input);
    Napi::Promise p = worker->promise();
    worker->Queue();
    return p;
  }

  // Speculative decoding: draftBegin(key, tokens: Int32Array) gives the drafter a sequence's
  // tokens so far; draftEnd(key, finished) drops it. Both only queue (the step thread applies them).
  Napi::Value draftBegin(const Napi::CallbackInfo& info) {
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

  Napi::Value draftEnd(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (!engine_ || engine_->drafter() == nullptr) return env.Undefined();
    if (info.Length() < 1 || !info[0].IsNumber()) throw make_error(env, "invalid_argument", "draftEnd(key: number, finished?: boolean)");
    engine_->drafter()->end(info[0].As<Napi::Number>().Int64Value(), info.Length() > 1 && info[1].ToBoolean().Value());
    return env.Undefined();
  }

  // embed(tokens: Int32Array, lengths: Int32Array, pooling: 0 last | 1 mean, normalize: bool)
  //   -> Promise<Float32Array> of [lengths.length][hiddenSize] (Engine::embed, embedding.cc).
  Napi::Value embed(const Napi::CallbackInfo& info) {
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

    class EmbedWorker : public PromiseWorker {
     public:
      EmbedWorker(Napi::Env env, std::shared_ptr<Engine> engine, std::shared_ptr<EmbedInput> input)
          : PromiseWorker(env), engine_(std::move(engine)), input_(std::move(input)) {}

     protected:
      void run() override { output_ = engine_->embed(*input_); }
      Napi::Value result(Napi::Env env) override { return to_typed<float>(env, output_.vectors); }

     private:
      std::shared_ptr<Engine> engine_;
      std::shared_ptr<EmbedInput> input_;
      EmbedOutput output_;
    };

    auto* worker = new EmbedWorker(env, engine, input);
    Napi::Promise p = worker->promise();
    worker->Queue();
    return p;
  }

  // loadLora(slot, {dir, rank, scale, targets}): reads the adapter's factors on a worker thread,
  // then swaps it into the slot between steps. The config was checked by the caller
  // (workers/lora/peft-adapter.ts); this checks the tensors. Resolves {numParameters}.
  Napi::Value loadLora(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    auto engine = require_open(env);
    if (info.Length() < 2 || !info[0].IsNumber() || !info[1].IsObject()) {
      throw make_error(env, "invalid_argument", "loadLora(slot: number, {dir, rank, scale, targets})");
    }
    const int32_t slot = info[0].As<Napi::Number>().Int32Value();
    Napi::Object o = info[1].As<Napi::Object>();
    if (!o.Get("dir").IsString() || !o.Get("rank").IsNumber() || !o.Get("scale").IsNumber() || !o.Get("targets").IsArray()) {
      throw make_error(env, "invalid_argument", "loadLora: {dir: string, rank: number, scale: number, targets: string[]}");
    }
    LoraSpec spec;
    spec.dir = o.Get("dir").As<Napi::String>().Utf8Value();
    spec.rank = o.Get("rank").As<Napi::Number>().Int32Value();
    spec.scale = o.Get("scale").As<Napi::Number>().FloatValue();
    Napi::Array targets = o.Get("targets").As<Napi::Array>();
    for (uint32_t i = 0; i < targets.Length(); ++i) {
      const std::string m = targets.Get(i).ToString().Utf8Value();
      bool found = false;
      for (int t = 0; t < kNumLoraTargets; ++t) {
        if (m == lora_target_module(static_cast<LoraTarget>(t))) {
          spec.targets.push_back(static_cast<LoraTarget>(t));
          found = true;
        }
      }
      if (!found) throw make_error(env, "invalid_argument", "loadLora: unsupported target module '" + m + "'");
    }
    if (!engine->supports_lora()) {
      throw make_error(env, "unavailable", std::string("backend '") + engine->backend_name() + "' has no LoRA kernels");
    }
    class LoraWorker : public PromiseWorker {
     public:
      LoraWorker(Napi::Env env, std::shared_ptr<Engine> engine, int32_t slot, LoraSpec spec)
          : PromiseWorker(env), engine_(std::move(engine)), slot_(slot), spec_(std::move(spec)) {}

     protected:
      void run() override {
        auto adapter = engine_->read_lora(spec_);
        params_ = adapter->num_parameters;
        engine_->set_lora(slot_, std::move(adapter));
      }
      Napi::Value result(Napi::Env env) override {
        Napi::Object r = Napi::Object::New(env);
        r.Set("numParameters", Napi::Number::New(env, static_cast<double>(params_)));
        return r;
      }

     private:
      std::shared_ptr<Engine> engine_;
      int32_t slot_;
      LoraSpec spec_;
      size_t params_ = 0;
    };
    auto* worker = new LoraWorker(env, engine, slot, std::move(spec));
    Napi::Promise p = worker->promise();
    worker->Queue();
    return p;
  }

  // unloadLora(slot): empties the slot after any running step (a worker thread waits for it).
  Napi::Value unloadLora(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    auto engine = require_open(env);
    if (info.Length() < 1 || !info[0].IsNumber()) throw make_error(env, "invalid_argument", "unloadLora(slot: number)");
    class UnloadWorker : public PromiseWorker {
     public:
      UnloadWorker(Napi::Env env, std::shared_ptr<Engine> engine, int32_t slot)
          : PromiseWorker(env), engine_(std::move(engine)), slot_(slot) {}

     protected:
      void run() override { engine_->set_lora(slot_, nullptr); }
      Napi::Value result(Napi::Env env) override { return env.Undefined(); }

     private:
      std::shared_ptr<Engine> engine_;
      int32_t slot_;
    };
    auto* worker = new UnloadWorker(env, engine, info[0].As<Napi::Number>().Int32Value());
    Napi::Promise p = worker->promise();
    worker->Queue();
    return p;
  }

  // The KV pool as an external ArrayBuffer over the engine's own memory (no copy), so a UCX
  // agent can register it and peers can read blocks in place. The buffer holds a reference
  // to the engine: the pool outlives close() until the buffer is collected, so a registered
  // region never points at freed memory.
  // A caller-owned pool (loadEngine's kvPool, adoptKvPool) comes back as that same
  // ArrayBuffer: its owner (the UCX agent) decides its lifetime, not the engine.
  Napi::Value kvPool(const Napi::CallbackInfo& info) {
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
  Napi::Value adoptKvPool(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    auto engine = require_open(env);
    if (info.Length() < 1 || !info[0].IsArrayBuffer()) {
      throw make_error(env, "invalid_argument", "adoptKvPool(buffer: ArrayBuffer)");
    }
    Napi::ArrayBuffer buf = info[0].As<Napi::ArrayBuffer>();
    try {
      engine->adopt_kv_pool(buf.Data(), buf.ByteLength());
    } catch (const NativeError& e) {
      throw make_error(env, e.code_name(), e.what());
    }
    pool_ = Napi::Persistent(buf);
    return env.Undefined();
  }

  // The masks of the step started with deferMasks; no arguments = no masks this step.
  Napi::Value supplyMasks(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    auto pending = std::move(pending_masks_);
    pending_masks_.reset();
    if (!pending) throw make_error(env, "invalid_argument", "supplyMasks: no step is waiting for masks");
    std::vector<int32_t> rows;
    std::vector<uint32_t> masks;
    if (info.Length() > 1 && !info[0].IsUndefined()) {
      if (!info[0].IsTypedArray() || !info[1].IsTypedArray() || info[0].As<Napi::TypedArray>().TypedArrayType() != napi_int32_array ||
          info[1].As<Napi::TypedArray>().TypedArrayType() != napi_uint32_array) {
        pending->supply({}, {});
        throw make_error(env, "invalid_argument", "supplyMasks(maskRows: Int32Array, allowedMasks: Uint32Array)");
      }
      auto r = info[0].As<Napi::Int32Array>();
      auto m = info[1].As<Napi::Uint32Array>();
      rows.assign(r.Data(), r.Data() + r.ElementLength());
      masks.assign(m.Data(), m.Data() + m.ElementLength());
    }
    pending->supply(std::move(rows), std::move(masks));
    return env.Undefined();
  }

  // KV movement (issue 24). Copies run on libuv worker threads and settle Promises; the
  // typed arrays they read or write stay referenced until then. Layer ranges: [l0, l1].
  static std::vector<int32_t> int32s(Napi::Env env, Napi::Value v, const char* what) {
    if (!v.IsTypedArray() || v.As<Napi::TypedArray>().TypedArrayType() != napi_int32_array) {
      throw make_error(env, "invalid_argument", std::string(what) + " must be an Int32Array");
    }
    auto a = v.As<Napi::Int32Array>();
    return std::vector<int32_t>(a.Data(), a.Data() + a.ElementLength());
  }
  static Napi::Uint8Array bytes_arg(Napi::Env env, Napi::Value v, const char* what) {
    if (!v.IsTypedArray() || v.As<Napi::TypedArray>().TypedArrayType() != napi_uint8_array) {
      throw make_error(env, "invalid_argument", std::string(what) + " must be a Uint8Array");
    }
    return v.As<Napi::Uint8Array>();
  }
  static std::pair<int, int> layers_arg(Napi::Env env, Napi::Value v) {
    if (v.IsUndefined() || v.IsNull()) return {0, -1};
    if (!v.IsArray() || v.As<Napi::Array>().Length() != 2) throw make_error(env, "invalid_argument", "layers must be [l0, l1]");
    auto a = v.As<Napi::Array>();
    return {a.Get(0u).ToNumber().Int32Value(), a.Get(1u).ToNumber().Int32Value()};
  }
  /** { blockSize, dtype: 'f32' | 'bf16', numBlocks?, numLayers?, numKvHeads?, headDim? }; missing fields: this engine's. */
  static KvLayout layout_arg(Napi::Env env, const Engine& engine, Napi::Value v) {
    KvLayout kv = engine.kv_layout();
    if (v.IsUndefined() || v.IsNull()) return kv;
    if (!v.IsObject()) throw make_error(env, "invalid_argument", "a KV layout must be an object");
    Napi::Object o = v.As<Napi::Object>();
    auto num = [&](const char* key, int64_t& out) {
      if (o.Get(key).IsNumber()) out = static_cast<int64_t>(o.Get(key).As<Napi::Number>().DoubleValue());
    };
    num("blockSize", kv.block_size);
    num("numBlocks", kv.num_blocks);
    num("numLayers", kv.num_layers);
    num("numKvHeads", kv.num_kv_heads);
    num("headDim", kv.head_dim);
    if (o.Get("dtype").IsString()) {
      const std::string d = o.Get("dtype").As<Napi::String>().Utf8Value();
      if (d != "f32" && d != "bf16") throw make_error(env, "invalid_argument", "dtype '" + d + "' (expected f32 or bf16)");
      kv.elem_bytes = d == "f32" ? 4 : 2;
    }
    return kv;
  }

  class KvWorker : public PromiseWorker {
   public:
    KvWorker(Napi::Env env, std::function<void()> fn, Napi::Value keep)
        : PromiseWorker(env), fn_(std::move(fn)) {
      if (keep.IsObject()) keep_ = Napi::Persistent(keep.As<Napi::Object>());
    }

   protected:
    void run() override { fn_(); }
    Napi::Value result(Napi::Env env) override { return env.Undefined(); }

   private:
    std::function<void()> fn_;
    Napi::ObjectReference keep_;
  };

  Napi::Value queue_kv(Napi::Env env, std::function<void()> fn, Napi::Value keep) {
    auto* worker = new KvWorker(env, std::move(fn), keep);
    Napi::Promise p = worker->promise();
    worker->Queue();
    return p;
  }

  // kvReadBlocks(ids: Int32Array, dst: Uint8Array, layers?: [l0, l1]): Promise<void>
  Napi::Value kvReadBlocks(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    auto engine = require_open(env);
    auto ids = int32s(env, info[0], "kvReadBlocks: ids");
    Napi::Uint8Array dst = bytes_arg(env, info[1], "kvReadBlocks: dst");
    const auto [l0, l1] = layers_arg(env, info[2]);
    uint8_t* data = dst.Data();
    const size_t bytes = dst.ByteLength();
    return queue_kv(env, [engine, ids = std::move(ids), data, bytes, l0 = l0, l1 = l1] { engine->kv_read_blocks(ids, data, bytes, l0, l1); },
                    dst);
  }

  // kvWriteBlocks(ids: Int32Array, src: Uint8Array, srcLayout?: KvLayout, layers?: [l0, l1], srcFirstToken?: number): Promise<void>
  Napi::Value kvWriteBlocks(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    auto engine = require_open(env);
    auto ids = int32s(env, info[0], "kvWriteBlocks: ids");
    Napi::Uint8Array src = bytes_arg(env, info[1], "kvWriteBlocks: src");
    const KvLayout layout = layout_arg(env, *engine, info[2]);
    const auto [l0, l1] = layers_arg(env, info[3]);
    const int64_t first = info[4].IsNumber() ? static_cast<int64_t>(info[4].As<Napi::Number>().DoubleValue()) : 0;
    const uint8_t* data = src.Data();
    const size_t bytes = src.ByteLength();
    return queue_kv(env,
                    [engine, ids = std::move(ids), data, bytes, layout, l0 = l0, l1 = l1, first] {
                      engine->kv_write_blocks(ids, data, bytes, layout, l0, l1, first);
                    },
                    src);
  }

  // kvExportHandle(): Uint8Array | null. Synchronous; waits for a running step (the SIMT pool
  // moves into shared memory on the first call), so call it once before serving.
  Napi::Value kvExportHandle(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    auto engine = require_open(env);
    std::string h;
    try {
      h = engine->kv_export_handle();
    } catch (const NativeError& e) {
      throw make_error(env, e.code_name(), e.what());
    }
    if (h.empty()) return env.Null();
    Napi::Uint8Array out = Napi::Uint8Array::New(env, h.size());
    std::memcpy(out.Data(), h.data(), h.size());
    return out;
  }

  // kvOpenPeer(handle: Uint8Array, peerLayout: KvLayout with numBlocks): number
  Napi::Value kvOpenPeer(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    auto engine = require_open(env);
    Napi::Uint8Array h = bytes_arg(env, info[0], "kvOpenPeer: handle");
    const KvLayout layout = layout_arg(env, *engine, info[1]);
    try {
      return Napi::Number::New(env, engine->kv_open_peer(std::string(reinterpret_cast<const char*>(h.Data()), h.ByteLength()), layout));
    } catch (const NativeError& e) {
      throw make_error(env, e.code_name(), e.what());
    }
  }

  // kvCopyFromPeer(peer: number, srcIds: Int32Array, dstIds: Int32Array, layers?: [l0, l1], srcFirstToken?: number): Promise<void>
  Napi::Value kvCopyFromPeer(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    auto engine = require_open(env);
    if (!info[0].IsNumber()) throw make_error(env, "invalid_argument", "kvCopyFromPeer: peer must be a number");
    const int peer = info[0].As<Napi::Number>().Int32Value();
    auto src = int32s(env, info[1], "kvCopyFromPeer: srcIds");
    auto dst = int32s(env, info[2], "kvCopyFromPeer: dstIds");
    const auto [l0, l1] = layers_arg(env, info[3]);
    const int64_t first = info[4].IsNumber() ? static_cast<int64_t>(info[4].As<Napi::Number>().DoubleValue()) : 0;
    return queue_kv(env,
                    [engine, peer, src = std::move(src), dst = std::move(dst), l0 = l0, l1 = l1, first] {
                      engine->kv_copy_from_peer(peer, src, dst, l0, l1, first);
                    },
                    env.Undefined());
  }

  Napi::Value kvClosePeer(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (engine_ && info[0].IsNumber()) engine_->kv_close_peer(info[0].As<Napi::Number>().Int32Value());
    return env.Undefined();
  }

  // layerProgress(): BigInt64Array [forwards begun, layers written by the latest], a live view
  // of memory the backend writes (no copy; it holds a reference to the engine, like kvPool).
  Napi::Value layerProgress(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    auto engine = require_open(env);
    const int64_t* p = engine->layer_progress();
    if (p == nullptr) return env.Null();
    auto* keep = new std::shared_ptr<Engine>(engine);
    Napi::ArrayBuffer buf = Napi::ArrayBuffer::New(
        env, const_cast<int64_t*>(p), 2 * sizeof(int64_t), [](Napi::Env, void*, std::shared_ptr<Engine>* hint) { delete hint; }, keep);
    return Napi::BigInt64Array::New(env, 2, buf, 0);
  }

  Napi::Value close(const Napi::CallbackInfo& info) {
    if (pending_masks_) pending_masks_->supply({}, {});
    pending_masks_.reset();
    engine_.reset();
    pool_.Reset();
    return info.Env().Undefined();
  }

  std::shared_ptr<Engine> engine_;
  // The step in flight that waits for supplyMasks() (deferMasks), if any.
  std::shared_ptr<DeferredMasks> pending_masks_;
  // Keeps a caller-owned pool's ArrayBuffer referenced while the handle lives.
  Napi::Reference<Napi::ArrayBuffer> pool_;
};

void read_engine_options(Napi::Env env, Napi::Object o, EngineOptions& opts) {
  if (!o.Get("modelDir").IsString()) throw make_error(env, "invalid_argument", "loadEngine: modelDir must be a string");
  opts.model_dir = o.Get("modelDir").As<Napi::String>().Utf8Value();
  auto num = [&](const char* key, double fallback) {
    Napi::Value v = o.Get(key);
    return v.IsNumber() ? v.As<Napi::Number>().DoubleValue() : fallback;
  };
  if (o.Get("device").IsString()) opts.backend.device = o.Get("device").As<Napi::String>().Utf8Value();
  opts.backend.num_blocks = static_cast<int64_t>(num("numBlocks", 0));
  opts.backend.memory_budget_bytes = static_cast<int64_t>(num("memoryBudgetBytes", 0));
  opts.backend.block_size = static_cast<int64_t>(num("blockSize", 16));
  opts.backend.gpu_memory_utilization = num("gpuMemoryUtilization", 0);
  opts.backend.max_batch_tokens = static_cast<int64_t>(num("maxBatchTokens", 8192));
  opts.backend.max_seqs = static_cast<int64_t>(num("maxSeqs", 256));
  if (o.Get("cudaGraphs").IsBoolean()) opts.backend.cuda_graphs = o.Get("cudaGraphs").As<Napi::Boolean>().Value();
  if (o.Get("gemm").IsString()) opts.backend.gemm = o.Get("gemm").As<Napi::String>().Utf8Value();
  opts.threads = static_cast<int>(num("threads", 0));
  // speculative: {method: 'ngram'|'suffix', numSpeculativeTokens, promptLookupMin/Max, suffix*} (spec/drafter.h)
  if (o.Get("speculative").IsObject()) {
    Napi::Object sp = o.Get("speculative").As<Napi::Object>();
    auto sp_num = [&](const char* key, double fallback) {
      Napi::Value v = sp.Get(key);
      return v.IsNumber() ? v.As<Napi::Number>().DoubleValue() : fallback;
    };
    spec::DraftConfig c;
    try {
      c.method = spec::parse_draft_method(sp.Get("method").IsString() ? sp.Get("method").As<Napi::String>().Utf8Value() : "");
    } catch (const NativeError& e) {
      throw make_error(env, e.code_name(), e.what());
    }
    c.max_drafts = static_cast<int32_t>(sp_num("numSpeculativeTokens", c.max_drafts));
    c.ngram_min = static_cast<int32_t>(sp_num("promptLookupMin", c.ngram_min));
    c.ngram_max = static_cast<int32_t>(sp_num("promptLookupMax", c.ngram_max));
    c.suffix_max_depth = static_cast<int32_t>(sp_num("suffixMaxDepth", c.suffix_max_depth));
    c.suffix_max_spec_factor = static_cast<float>(sp_num("suffixMaxSpecFactor", c.suffix_max_spec_factor));
    c.suffix_min_token_prob = static_cast<float>(sp_num("suffixMinTokenProb", c.suffix_min_token_prob));
    c.suffix_cache_tokens = static_cast<int64_t>(sp_num("suffixCacheTokens", static_cast<double>(c.suffix_cache_tokens)));
    opts.speculative = c;
  }
}

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
  Napi::Promise p = worker->promise();
  worker->Queue();
  return p;
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
  KvLayout kv;
  try {
    kv = Engine::describe_kv_layout(opts);
  } catch (const NativeError& e) {
    throw make_error(env, e.code_name(), e.what());
  }
  Napi::Object o = Napi::Object::New(env);
  o.Set("numBlocks", Napi::Number::New(env, static_cast<double>(kv.num_blocks)));
  o.Set("blockSize", Napi::Number::New(env, static_cast<double>(kv.block_size)));
  o.Set("numLayers", Napi::Number::New(env, static_cast<double>(kv.num_layers)));
  o.Set("numKvHeads", Napi::Number::New(env, static_cast<double>(kv.num_kv_heads)));
  o.Set("headDim", Napi::Number::New(env, static_cast<double>(kv.head_dim)));
  o.Set("kvBytesPerToken", Napi::Number::New(env, static_cast<double>(kv.bytes_per_token())));
  o.Set("kvBytesPerBlock", Napi::Number::New(env, static_cast<double>(kv.bytes_per_block())));
  o.Set("kvLayout", kKvLayoutName);
  o.Set("kvDtype", kv.elem_bytes == 2 ? "bf16" : "f32");
  return o;
}

Napi::Value backends(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto names = available_backends();
  Napi::Array out = Napi::Array::New(env, names.size());
  for (size_t i = 0; i < names.size(); ++i) out.Set(static_cast<uint32_t>(i), names[i]);
  return out;
}

// Every backend of this build: { name, available, reason?, detail? }. Probes the CUDA driver
// (cheap; no allocation) so `cuda` is reported available only with a driver and a device.
Napi::Value backend_status_js(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto all = backend_status();
  Napi::Array out = Napi::Array::New(env, all.size());
  for (size_t i = 0; i < all.size(); ++i) {
    Napi::Object o = Napi::Object::New(env);
    o.Set("name", all[i].name);
    o.Set("available", Napi::Boolean::New(env, all[i].available));
    if (!all[i].reason.empty()) o.Set("reason", all[i].reason);
    if (!all[i].detail.empty()) o.Set("detail", all[i].detail);
    out.Set(static_cast<uint32_t>(i), o);
  }
  return out;
}

Napi::Object init(Napi::Env env, Napi::Object exports) {
  auto* data = new AddonData();
  data->engine_ctor = Napi::Persistent(EngineHandle::define(env));
  env.SetInstanceData<AddonData>(data);
  exports.Set("loadEngine", Napi::Function::New(env, load_engine, "loadEngine"));
  exports.Set("backends", Napi::Function::New(env, backends, "backends"));
  exports.Set("backendStatus", Napi::Function::New(env, backend_status_js, "backendStatus"));
  exports.Set("describeKvLayout", Napi::Function::New(env, describe_kv_layout, "describeKvLayout"));
  exports.Set("kvLayout", Napi::String::New(env, kKvLayoutName));
  return exports;
}

}  // namespace
}  // namespace tandem

static Napi::Object InitTandemNative(Napi::Env env, Napi::Object exports) { return tandem::init(env, exports); }

NODE_API_MODULE(tandem_native, InitTandemNative)

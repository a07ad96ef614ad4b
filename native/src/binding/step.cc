// EngineHandle.step and supplyMasks: the flat typed arrays of a step (BatchMarshal in
// workers/engines/native/) become a StepInput, copied on the JS thread so the caller may reuse
// its buffers at once; the step runs on a worker thread (Engine::step).
#include <memory>
#include <vector>

#include "convert.h"
#include "engine_handle.h"

namespace tandem::binding {

namespace {
// Row strides of seqMeta and sampling (SEQ_META_STRIDE, SAMPLING_STRIDE in native/lib/binding.ts).
constexpr int kSeqMetaStride = 11;
constexpr int kSamplingStride = 8;
constexpr int kSpecMetaStride = 3;  // speculative decoding: SPEC_META_STRIDE
}  // namespace

Napi::Value EngineHandle::step(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto engine = require_open(env);
  if (info.Length() < 5 || !info[0].IsTypedArray() || !info[1].IsTypedArray() || !info[2].IsTypedArray() ||
      !info[3].IsTypedArray() || !info[4].IsTypedArray()) {
    throw make_error(env, "invalid_argument",
                     "step(tokens: Int32Array, seqMeta: Int32Array, blockTables: Int32Array, history: "
                     "Int32Array, sampling: Float64Array, returnLogits?: boolean, biasIds?: Int32Array, "
                     "biasValues?: Float32Array, maskRows?: Int32Array, allowedMasks?: Uint32Array, deferMasks?: boolean, "
                     "loraSlots?: Int32Array, specMeta?: Int32Array)");
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

  return queue_engine_call<StepInput, StepOutput>(
      env, engine, input, [](Engine& e, const StepInput& in) { return e.step(in); },
      [](Napi::Env env, const StepInput& in, const StepOutput& out) -> Napi::Value {
        Napi::Object o = Napi::Object::New(env);
        o.Set("tokens", to_typed<int32_t>(env, out.tokens));
        o.Set("logprobs", to_typed<float>(env, out.logprobs));
        o.Set("topStride", Napi::Number::New(env, out.top_stride));
        o.Set("topIds", to_typed<int32_t>(env, out.top_ids));
        o.Set("topLogprobs", to_typed<float>(env, out.top_logprobs));
        if (in.return_logits) o.Set("logits", to_typed<float>(env, out.logits));
        // Speculative decoding: tokens per sampled sequence, and the drafter's proposals.
        o.Set("emitted", to_typed<int32_t>(env, out.emitted));
        if (!out.draft_counts.empty()) {
          o.Set("draftCounts", to_typed<int32_t>(env, out.draft_counts));
          o.Set("drafts", to_typed<int32_t>(env, out.drafts));
          o.Set("draftScores", to_typed<float>(env, out.draft_scores));
        }
        return o;
      });
}

// The masks of the step started with deferMasks; no arguments = no masks this step.
Napi::Value EngineHandle::supplyMasks(const Napi::CallbackInfo& info) {
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

}  // namespace tandem::binding

#include "engine.h"

#include <algorithm>
#include <cstdint>
#include <cmath>
#include <thread>

#include "../spec/verify.h"
#include "error.h"
#include "fp8_weights.h"
#include "quant_config.h"
#include "safetensors.h"
#include "thread_pool.h"

namespace tandem {

namespace {

constexpr int32_t kMaxLoraSlots = 4096;

// Mirrors the backends' sizing (f32 pool on the CPU, bf16 on GPUs); the Engine checks the
// backend agrees after load.
KvLayout layout_for(const ModelConfig& c, const BackendOptions& o) {
  KvLayout kv;
  kv.block_size = o.block_size;
  kv.num_layers = c.num_layers;
  kv.num_kv_heads = c.num_kv_heads;
  kv.head_dim = c.head_dim;
  kv.elem_bytes = kv_elem_bytes(o.device, o.kv_cache_dtype);
  if (kv.block_size <= 0 || kv.block_size > 1024) {
    throw NativeError(ErrorCode::kInvalidArgument, "blockSize must be in [1, 1024]");
  }
  const int64_t block_bytes = static_cast<int64_t>(kv.bytes_per_block());
  if (o.num_blocks > 0) {
    kv.num_blocks = o.num_blocks;
  } else if (o.kv_pool != nullptr) {
    kv.num_blocks = static_cast<int64_t>(o.kv_pool_bytes) / block_bytes;
  } else if (o.memory_budget_bytes > 0) {
    kv.num_blocks = o.memory_budget_bytes / block_bytes;
  }
  if (kv.num_blocks < 1) {
    throw NativeError(ErrorCode::kInvalidArgument, "the KV pool holds no block (one block is " +
                                                       std::to_string(block_bytes) + " bytes)");
  }
  return kv;
}

void check_external_pool(const void* base, size_t bytes, const KvLayout& kv) {
  const size_t want = kv.bytes_per_block() * static_cast<size_t>(kv.num_blocks);
  if (bytes != want) {
    throw NativeError(ErrorCode::kInvalidArgument,
                      "kvPool is " + std::to_string(bytes) + " bytes, but " + std::to_string(kv.num_blocks) +
                          " blocks x " + std::to_string(kv.bytes_per_block()) + " bytes per block = " +
                          std::to_string(want) + " bytes");
  }
  // The own pool is malloc-aligned (16); UCX allocations are page-aligned.
  if (reinterpret_cast<uintptr_t>(base) % 16 != 0) {
    throw NativeError(ErrorCode::kInvalidArgument, "kvPool must be 16-byte aligned");
  }
}

}  // namespace

KvLayout Engine::describe_kv_layout(const EngineOptions& options) {
  return layout_for(ModelConfig::load(options.model_dir), options.backend);
}

std::unique_ptr<Engine> Engine::load(const EngineOptions& options) {
  std::unique_ptr<Engine> e(new Engine());
  e->config_ = ModelConfig::load(options.model_dir);
  BackendOptions backend = options.backend;
  apply_quantization_option(e->config_.quant, backend.quantization);
  if (backend.fp8_compute != "auto" && backend.fp8_compute != "w8a16") {
    throw NativeError(ErrorCode::kInvalidArgument, "fp8 compute '" + backend.fp8_compute + "' (expected auto or w8a16)");
  }
  if (backend.kv_pool != nullptr && backend.device != "cpu") {
    throw NativeError(ErrorCode::kInvalidArgument, "device '" + backend.device +
                                                       "' keeps its KV pool in device memory: a caller-owned (host) pool cannot be used");
  }
  if (backend.kv_pool != nullptr) {
    // Fix the block count before the (slow) weight load so a wrong size fails fast.
    const KvLayout want = layout_for(e->config_, backend);
    check_external_pool(backend.kv_pool, backend.kv_pool_bytes, want);
    backend.num_blocks = want.num_blocks;
    e->kv_pool_external_ = true;
  }
  e->max_pass_tokens_ = std::max<int64_t>(1, backend.max_batch_tokens);
  if (options.speculative.has_value()) {
    spec::check_draft_config(*options.speculative);  // before the (slow) weight load
    backend.max_drafts = options.speculative->max_drafts;
  }
  auto store = SafetensorsStore::open_dir(options.model_dir);
  int threads = options.threads > 0 ? options.threads
                                    : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  e->pool_ = std::make_unique<ThreadPool>(threads);
  // The store (and its mappings) is dropped after this: backends copy what they keep.
  e->backend_ = create_backend(e->config_, *store, backend, *e->pool_);
  e->kv_scales_ = load_kv_scales(*store, e->config_);
  if (options.speculative.has_value()) e->drafter_ = spec::make_drafter(*options.speculative);
  if (backend.kv_pool != nullptr && (e->kv_pool_base() != backend.kv_pool || e->kv_pool_bytes() != backend.kv_pool_bytes)) {
    throw NativeError(ErrorCode::kInternal, std::string("backend '") + e->backend_name() +
                                                "' did not place its KV pool in the given memory");
  }
  return e;
}

Engine::~Engine() {
  if (!backend_) return;
  for (auto& [id, peer] : peers_) backend_->kv_close_peer(peer.base);
}

int Engine::num_threads() const { return pool_->size(); }

void Engine::adopt_kv_pool(void* base, size_t bytes) {
  std::lock_guard<std::mutex> lock(step_mu_);
  if (!backend_->kv_pool_on_host()) {
    throw NativeError(ErrorCode::kInvalidArgument, std::string("backend '") + backend_->name() +
                                                       "' keeps its KV pool in device memory: it cannot adopt a host pool");
  }
  check_external_pool(base, bytes, kv_layout());
  backend_->adopt_kv_pool(base);
  kv_pool_external_ = true;
}

void Engine::set_lora(int32_t slot, std::shared_ptr<const LoraAdapter> adapter) {
  if (slot < 0 || slot >= kMaxLoraSlots) {
    throw NativeError(ErrorCode::kInvalidArgument, "lora slot must be in [0, " + std::to_string(kMaxLoraSlots) + ")");
  }
  std::lock_guard<std::mutex> lock(step_mu_);
  backend_->set_lora(slot, adapter);
  if (static_cast<size_t>(slot) >= lora_loaded_.size()) lora_loaded_.resize(static_cast<size_t>(slot) + 1, false);
  lora_loaded_[static_cast<size_t>(slot)] = adapter != nullptr;
}

void Engine::validate(const StepInput& in) const {
  auto bad = [](const std::string& what) { throw NativeError(ErrorCode::kInvalidArgument, "step: " + what); };
  const KvLayout& kv = backend_->kv_layout();
  const int64_t num_tokens = static_cast<int64_t>(in.tokens.size());
  int64_t expected_offset = 0;
  for (size_t i = 0; i < in.seqs.size(); ++i) {
    const SeqInput& s = in.seqs[i];
    const std::string who = "sequence " + std::to_string(i) + ": ";
    if (s.num_tokens <= 0) bad(who + "has no tokens");
    // The backend maps tokens to sequences by contiguous ranges in batch order.
    if (s.token_offset != expected_offset) bad(who + "tokens are not contiguous in batch order");
    expected_offset += s.num_tokens;
    if (s.start_pos < 0) bad(who + "negative startPos");
    const int64_t end_pos = static_cast<int64_t>(s.start_pos) + s.num_tokens;
    if (end_pos > config_.max_position_embeddings) {
      bad(who + "position " + std::to_string(end_pos) + " exceeds max_position_embeddings " +
          std::to_string(config_.max_position_embeddings));
    }
    const int64_t needed = (end_pos + kv.block_size - 1) / kv.block_size;
    if (s.num_blocks < needed) {
      bad(who + "block table has " + std::to_string(s.num_blocks) + " blocks, positions need " +
          std::to_string(needed));
    }
    if (s.block_offset < 0 || static_cast<size_t>(s.block_offset) + static_cast<size_t>(s.num_blocks) >
                                  in.block_tables.size()) {
      bad(who + "block table outside the blockTables array");
    }
    for (int64_t b = 0; b < needed; ++b) {
      const int32_t id = in.block_tables[static_cast<size_t>(s.block_offset + b)];
      if (id < 0 || id >= kv.num_blocks) bad(who + "block id " + std::to_string(id) + " out of range");
    }
    if (s.history_len > 0 && (s.history_offset < 0 || static_cast<size_t>(s.history_offset) +
                                                           static_cast<size_t>(s.history_len) >
                                                           in.history.size())) {
      bad(who + "history outside the history array");
    }
    if (s.bias_len < 0 || (s.bias_len > 0 && (s.bias_offset < 0 || static_cast<size_t>(s.bias_offset) +
                                                                      static_cast<size_t>(s.bias_len) >
                                                                      in.bias_ids.size()))) {
      bad(who + "logit bias outside the bias arrays");
    }
    if (s.mask_row >= 0) {
      const size_t words = (static_cast<size_t>(config_.vocab_size) + 31) / 32;
      if ((static_cast<size_t>(s.mask_row) + 1) * words > in.allowed_masks.size()) bad(who + "mask row outside allowedMasks");
    }
    if (s.num_drafts < 0 || s.num_drafts > spec::kMaxVerifyDrafts || (s.num_drafts > 0 && (!s.sample || s.num_drafts >= s.num_tokens))) {
      bad(who + "numDrafts must be in [0, " + std::to_string(spec::kMaxVerifyDrafts) + "], below its token count, on a sampled sequence");
    }
    if (s.mask_row >= 0 && s.num_drafts > 0) {
      const size_t words = (static_cast<size_t>(config_.vocab_size) + 31) / 32;
      if ((static_cast<size_t>(s.mask_row) + 1 + static_cast<size_t>(s.num_drafts)) * words > in.allowed_masks.size()) {
        bad(who + "mask rows of its drafts outside allowedMasks");
      }
    }
    if (s.propose_drafts < 0) bad(who + "proposeDrafts must be >= 0");
    if (s.lora_slot >= 0 && (static_cast<size_t>(s.lora_slot) >= lora_loaded_.size() ||
                             !lora_loaded_[static_cast<size_t>(s.lora_slot)])) {
      bad(who + "no adapter in lora slot " + std::to_string(s.lora_slot));
    }
    if (s.sampling.top_p <= 0.0f || s.sampling.top_p > 1.0f) bad(who + "topP must be in (0, 1]");
    if (s.sampling.repetition_penalty <= 0.0f) bad(who + "repetitionPenalty must be > 0");
    if (!(s.sampling.temperature >= 0.0f)) bad(who + "temperature must be >= 0");
  }
  if (expected_offset != num_tokens) bad("tokens array length does not match the sequences");
  for (int32_t tok : in.tokens) {
    if (tok < 0 || tok >= config_.vocab_size) bad("token id " + std::to_string(tok) + " outside the vocabulary");
  }
}

StepOutput Engine::step(const StepInput& in) {
  std::lock_guard<std::mutex> lock(step_mu_);
  validate(in);
  ForwardBatch batch;
  batch.tokens = in.tokens.data();
  batch.num_tokens = static_cast<int32_t>(in.tokens.size());
  batch.seqs.reserve(in.seqs.size());
  std::vector<size_t> sampled;  // seq index per sampled sequence
  int32_t logit_rows = 0;
  for (size_t i = 0; i < in.seqs.size(); ++i) {
    const SeqInput& s = in.seqs[i];
    ForwardSeq f;
    f.token_offset = s.token_offset;
    f.num_tokens = s.num_tokens;
    f.start_pos = s.start_pos;
    f.block_table = in.block_tables.data() + s.block_offset;
    f.num_blocks = s.num_blocks;
    f.want_logits = s.sample;
    f.num_logits = s.num_drafts + 1;  // a verify step samples after the last token and after each draft
    f.lora_slot = s.lora_slot;
    if (s.sample) {
      sampled.push_back(i);
      logit_rows += f.num_logits;
    }
    batch.seqs.push_back(f);
  }
  batch.num_logit_rows = logit_rows;
  // A device backend returns once the forward is queued: the masks below are awaited while it runs.
  if (batch.num_tokens > 0) backend_->forward(batch);

  // Masks: given with the step, or supplied by the caller while the forward pass ran.
  const size_t vocab = static_cast<size_t>(config_.vocab_size);
  const size_t mask_words = (vocab + 31) / 32;
  const int32_t* deferred_rows = nullptr;
  const uint32_t* masks = in.allowed_masks.data();
  size_t masks_size = in.allowed_masks.size();
  if (in.deferred_masks) {
    DeferredMasks& d = *in.deferred_masks;
    if (!d.wait_for(std::chrono::seconds(60))) {
      throw NativeError(ErrorCode::kInternal, "step: structured-output masks were never supplied");
    }
    if (!d.rows.empty()) {
      if (d.rows.size() != in.seqs.size()) throw NativeError(ErrorCode::kInvalidArgument, "supplyMasks: maskRows needs one entry per sequence");
      for (size_t i = 0; i < d.rows.size(); ++i) {
        const int32_t row = d.rows[i];
        // A verify sequence's drafts take the rows after its first one.
        if (row >= 0 && (static_cast<size_t>(row) + 1 + static_cast<size_t>(in.seqs[i].num_drafts)) * mask_words > d.masks.size()) {
          throw NativeError(ErrorCode::kInvalidArgument, "supplyMasks: mask row outside allowedMasks");
        }
      }
      deferred_rows = d.rows.data();
      masks = d.masks.data();
      masks_size = d.masks.size();
    }
  }
  (void)masks_size;

  // One row per sampled position: after the last real token, then after each draft (spec/verify.h).
  spec::VerifyRows verify;
  verify.build(in, sampled);
  std::vector<SampleRow> rows(static_cast<size_t>(logit_rows));
  for (size_t r = 0; r < sampled.size(); ++r) {
    const size_t seq_index = sampled[r];
    const SeqInput& s = in.seqs[seq_index];
    const int32_t mask_row = in.deferred_masks ? (deferred_rows != nullptr ? deferred_rows[seq_index] : -1) : s.mask_row;
    for (int32_t j = 0; j <= s.num_drafts; ++j) {
      const int32_t at = verify.first_row[r] + j;
      SampleRow& row = rows[static_cast<size_t>(at)];
      row.logit_row = at;
      row.params = s.sampling;
      row.position = static_cast<int64_t>(s.start_pos) + s.num_tokens - s.num_drafts + j;
      if (s.history_len > 0) {
        // Penalties see the drafts before this row as generated tokens.
        const spec::VerifyRows::History h = verify.history(in, r, j);
        row.history = h.tokens;
        row.history_len = h.len;
        row.num_prompt = s.num_prompt;
      }
      row.num_top_logprobs = s.num_top_logprobs;
      if (s.bias_len > 0) {
        row.bias_ids = in.bias_ids.data() + s.bias_offset;
        row.bias_values = in.bias_values.data() + s.bias_offset;
        row.bias_len = s.bias_len;
      }
      if (mask_row >= 0) row.allowed = masks + static_cast<size_t>(mask_row + j) * mask_words;
    }
  }

  StepOutput out;
  SampledRows sampled_rows;
  if (!rows.empty()) backend_->sample(rows, sampled_rows);
  verify.accept(in, sampled, sampled_rows, out);
  if (in.return_logits && !rows.empty()) {
    out.logits.resize(rows.size() * vocab);
    backend_->read_logits(out.logits.data(), static_cast<int32_t>(rows.size()));
  }
  if (drafter_ != nullptr) draft(in, sampled, out);
  return out;
}

void Engine::set_drafter(std::unique_ptr<spec::Drafter> drafter) {
  std::lock_guard<std::mutex> lock(step_mu_);
  drafter_ = std::move(drafter);
}

// After sampling: each sampled sequence that asks for drafts gets its returned tokens appended
// to the drafter's view of it, then proposals for its next step (on this thread, timed with the step).
void Engine::draft(const StepInput& in, const std::vector<size_t>& sampled, StepOutput& out) {
  out.draft_counts.assign(sampled.size(), 0);
  draft_queries_.clear();
  int32_t token_at = 0;
  std::vector<int32_t> query_of(sampled.size(), -1);
  for (size_t r = 0; r < sampled.size(); ++r) {
    const SeqInput& s = in.seqs[sampled[r]];
    const int32_t n = out.emitted[r];
    if (s.draft_key >= 0) {
      spec::DraftQuery q;
      q.key = s.draft_key;
      q.new_tokens = out.tokens.data() + token_at;
      q.num_new = n;
      // Its length after this step: the tokens before the drafts, then the returned ones.
      q.expected_len = static_cast<int64_t>(s.start_pos) + s.num_tokens - s.num_drafts + n;
      q.max_drafts = s.propose_drafts;
      query_of[r] = static_cast<int32_t>(draft_queries_.size());
      draft_queries_.push_back(std::move(q));
    }
    token_at += n;
  }
  if (draft_queries_.empty()) return;
  drafter_->propose(draft_queries_, pool_.get());
  for (size_t r = 0; r < sampled.size(); ++r) {
    if (query_of[r] < 0) continue;
    const spec::DraftQuery& q = draft_queries_[static_cast<size_t>(query_of[r])];
    out.draft_counts[r] = static_cast<int32_t>(q.drafts.size());
    out.drafts.insert(out.drafts.end(), q.drafts.begin(), q.drafts.end());
    out.draft_scores.insert(out.draft_scores.end(), q.scores.begin(), q.scores.end());
  }
}

std::pair<int, int> Engine::kv_layers(int l0, int l1) const {
  const int layers = static_cast<int>(kv_layout().num_layers);
  if (l1 < 0) l1 = layers;
  if (l0 < 0 || l0 > l1 || l1 > layers) {
    throw NativeError(ErrorCode::kInvalidArgument, "layers [" + std::to_string(l0) + ", " + std::to_string(l1) +
                                                       ") outside the model's " + std::to_string(layers) + " layers");
  }
  return {l0, l1};
}

void Engine::kv_check_ids(const std::vector<int32_t>& ids, const KvLayout& layout, const char* what) const {
  for (int32_t id : ids) {
    if (id < 0 || id >= layout.num_blocks) {
      throw NativeError(ErrorCode::kInvalidArgument, std::string(what) + ": block id " + std::to_string(id) + " outside [0, " +
                                                         std::to_string(layout.num_blocks) + ")");
    }
  }
}

void Engine::kv_check_compatible(const KvLayout& o, const char* what) const {
  const KvLayout& kv = kv_layout();
  if (o.num_layers != kv.num_layers || o.num_kv_heads != kv.num_kv_heads || o.head_dim != kv.head_dim) {
    throw NativeError(ErrorCode::kInvalidArgument,
                      std::string(what) + ": layout of " + std::to_string(o.num_layers) + " layers x " + std::to_string(o.num_kv_heads) +
                          " KV heads x " + std::to_string(o.head_dim) + " does not match this model's " +
                          std::to_string(kv.num_layers) + " x " + std::to_string(kv.num_kv_heads) + " x " +
                          std::to_string(kv.head_dim) + " (a different tensor-parallel split is not supported yet)");
  }
  if (o.elem_bytes != 1 && o.elem_bytes != 2 && o.elem_bytes != 4) {
    throw NativeError(ErrorCode::kInvalidArgument, std::string(what) + ": dtype must be f32, bf16 or fp8_e4m3");
  }
  if (o.block_size <= 0 || o.block_size > 1024) {
    throw NativeError(ErrorCode::kInvalidArgument, std::string(what) + ": blockSize must be in [1, 1024]");
  }
}

void Engine::kv_read_blocks(const std::vector<int32_t>& ids, void* dst, size_t dst_bytes, int l0, int l1) {
  const auto [a, b] = kv_layers(l0, l1);
  kv_check_ids(ids, kv_layout(), "kvReadBlocks");
  const size_t want = ids.size() * kv_layout().bytes_per_block();
  if (dst_bytes < want) {
    throw NativeError(ErrorCode::kInvalidArgument, "kvReadBlocks: dst holds " + std::to_string(dst_bytes) + " bytes, " +
                                                       std::to_string(ids.size()) + " blocks need " + std::to_string(want));
  }
  std::lock_guard<std::mutex> lock(kv_mu_);
  backend_->kv_read_blocks(ids.data(), static_cast<int32_t>(ids.size()), dst, a, b);
}

void Engine::kv_write_blocks(const std::vector<int32_t>& ids, const void* src, size_t src_bytes, const KvLayout& src_layout,
                             int l0, int l1, int64_t src_first) {
  const auto [a, b] = kv_layers(l0, l1);
  kv_check_compatible(src_layout, "kvWriteBlocks");
  kv_check_ids(ids, kv_layout(), "kvWriteBlocks");
  const size_t bb = src_layout.bytes_per_block();
  if (src_bytes % bb != 0) {
    throw NativeError(ErrorCode::kInvalidArgument, "kvWriteBlocks: src holds " + std::to_string(src_bytes) +
                                                       " bytes, not whole blocks of " + std::to_string(bb));
  }
  if (src_first < 0 || (src_bytes > 0 && src_first >= static_cast<int64_t>(src_bytes / bb) * src_layout.block_size)) {
    throw NativeError(ErrorCode::kInvalidArgument, "kvWriteBlocks: srcFirstToken outside src");
  }
  std::lock_guard<std::mutex> lock(kv_mu_);
  backend_->kv_write_blocks(ids.data(), static_cast<int32_t>(ids.size()), src, src_layout, static_cast<int64_t>(src_bytes / bb), a, b,
                            src_first);
}

std::string Engine::kv_export_handle() {
  // The pool may move (SIMT: into shared memory): no step and no copy may run meanwhile.
  std::lock_guard<std::mutex> step_lock(step_mu_);
  std::lock_guard<std::mutex> lock(kv_mu_);
  return backend_->kv_export_handle();
}

int Engine::kv_open_peer(const std::string& handle, const KvLayout& peer) {
  kv_check_compatible(peer, "kvOpenPeer");
  if (peer.num_blocks < 1) throw NativeError(ErrorCode::kInvalidArgument, "kvOpenPeer: the peer layout needs numBlocks");
  std::lock_guard<std::mutex> lock(kv_mu_);
  void* base = backend_->kv_open_peer(handle, peer.bytes_per_block() * static_cast<size_t>(peer.num_blocks));
  const int id = next_peer_++;
  peers_[id] = Peer{base, peer};
  return id;
}

void Engine::kv_copy_from_peer(int peer, const std::vector<int32_t>& src_ids, const std::vector<int32_t>& dst_ids, int l0, int l1,
                               int64_t src_first) {
  const auto [a, b] = kv_layers(l0, l1);
  kv_check_ids(dst_ids, kv_layout(), "kvCopyFromPeer (dst)");
  std::lock_guard<std::mutex> lock(kv_mu_);
  auto it = peers_.find(peer);
  if (it == peers_.end()) throw NativeError(ErrorCode::kInvalidArgument, "kvCopyFromPeer: peer " + std::to_string(peer) + " is not open");
  kv_check_ids(src_ids, it->second.layout, "kvCopyFromPeer (src)");
  if (src_first < 0 || (!src_ids.empty() && src_first >= static_cast<int64_t>(src_ids.size()) * it->second.layout.block_size)) {
    throw NativeError(ErrorCode::kInvalidArgument, "kvCopyFromPeer: srcFirstToken outside srcIds");
  }
  backend_->kv_copy_from_peer(it->second.base, it->second.layout, src_ids.data(), static_cast<int32_t>(src_ids.size()),
                              dst_ids.data(), static_cast<int32_t>(dst_ids.size()), a, b, src_first);
}

void Engine::kv_close_peer(int peer) {
  std::lock_guard<std::mutex> lock(kv_mu_);
  auto it = peers_.find(peer);
  if (it == peers_.end()) return;
  backend_->kv_close_peer(it->second.base);
  peers_.erase(it);
}

}  // namespace tandem

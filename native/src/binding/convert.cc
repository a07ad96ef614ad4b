#include "convert.h"

namespace tandem::binding {

Napi::Error make_error(Napi::Env env, const std::string& code, const std::string& message) {
  Napi::Error err = Napi::Error::New(env, message);
  err.Set("code", Napi::String::New(env, code));
  return err;
}

std::vector<int32_t> int32s(Napi::Env env, Napi::Value v, const char* what) {
  if (!v.IsTypedArray() || v.As<Napi::TypedArray>().TypedArrayType() != napi_int32_array) {
    throw make_error(env, "invalid_argument", std::string(what) + " must be an Int32Array");
  }
  auto a = v.As<Napi::Int32Array>();
  return std::vector<int32_t>(a.Data(), a.Data() + a.ElementLength());
}

Napi::Uint8Array bytes_arg(Napi::Env env, Napi::Value v, const char* what) {
  if (!v.IsTypedArray() || v.As<Napi::TypedArray>().TypedArrayType() != napi_uint8_array) {
    throw make_error(env, "invalid_argument", std::string(what) + " must be a Uint8Array");
  }
  return v.As<Napi::Uint8Array>();
}

std::pair<int, int> layers_arg(Napi::Env env, Napi::Value v) {
  if (v.IsUndefined() || v.IsNull()) return {0, -1};
  if (!v.IsArray() || v.As<Napi::Array>().Length() != 2) throw make_error(env, "invalid_argument", "layers must be [l0, l1]");
  auto a = v.As<Napi::Array>();
  return {a.Get(0u).ToNumber().Int32Value(), a.Get(1u).ToNumber().Int32Value()};
}

KvLayout layout_arg(Napi::Env env, const Engine& engine, Napi::Value v) {
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
    if (kv_dtype_bytes(d) == 0) throw make_error(env, "invalid_argument", "dtype '" + d + "' (expected f32, bf16 or fp8_e4m3)");
    kv.elem_bytes = kv_dtype_bytes(d);
  }
  return kv;
}

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
  if (o.Get("kvCacheDtype").IsString()) opts.backend.kv_cache_dtype = o.Get("kvCacheDtype").As<Napi::String>().Utf8Value();
  if (o.Get("quantization").IsString()) opts.backend.quantization = o.Get("quantization").As<Napi::String>().Utf8Value();
  if (o.Get("fp8Compute").IsString()) opts.backend.fp8_compute = o.Get("fp8Compute").As<Napi::String>().Utf8Value();
  opts.threads = static_cast<int>(num("threads", 0));
  if (o.Get("speculative").IsObject()) opts.speculative = read_draft_config(env, o.Get("speculative").As<Napi::Object>());
}

spec::DraftConfig read_draft_config(Napi::Env env, Napi::Object sp) {
  auto num = [&](const char* key, double fallback) {
    Napi::Value v = sp.Get(key);
    return v.IsNumber() ? v.As<Napi::Number>().DoubleValue() : fallback;
  };
  spec::DraftConfig c;
  try {
    c.method = spec::parse_draft_method(sp.Get("method").IsString() ? sp.Get("method").As<Napi::String>().Utf8Value() : "");
  } catch (const NativeError& e) {
    throw make_error(env, e.code_name(), e.what());
  }
  c.max_drafts = static_cast<int32_t>(num("numSpeculativeTokens", c.max_drafts));
  c.ngram_min = static_cast<int32_t>(num("promptLookupMin", c.ngram_min));
  c.ngram_max = static_cast<int32_t>(num("promptLookupMax", c.ngram_max));
  c.suffix_max_depth = static_cast<int32_t>(num("suffixMaxDepth", c.suffix_max_depth));
  c.suffix_max_spec_factor = static_cast<float>(num("suffixMaxSpecFactor", c.suffix_max_spec_factor));
  c.suffix_min_token_prob = static_cast<float>(num("suffixMinTokenProb", c.suffix_min_token_prob));
  c.suffix_cache_tokens = static_cast<int64_t>(num("suffixCacheTokens", static_cast<double>(c.suffix_cache_tokens)));
  return c;
}

void PromiseWorker::Execute() {
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

void PromiseWorker::OnOK() {
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

VoidWorker::VoidWorker(Napi::Env env, std::function<void()> fn, Napi::Value keep) : PromiseWorker(env), fn_(std::move(fn)) {
  if (keep.IsObject()) keep_ = Napi::Persistent(keep.As<Napi::Object>());
}

Napi::Value queue_void(Napi::Env env, std::function<void()> fn, Napi::Value keep) {
  return (new VoidWorker(env, std::move(fn), keep))->start();
}

}  // namespace tandem::binding

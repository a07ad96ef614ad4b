#include "cublaslt.h"

#include <dlfcn.h>
#include <glob.h>

#include <cstdlib>
#include <vector>

namespace tandem::gpu {

// The subset of cublasLt.h used here. Values are the C API's, stable across CUDA 11-13.
namespace lt {
using Status = int;
using Handle = void*;
using Desc = void*;
using Layout = void*;
using Pref = void*;
struct Algo {
  uint64_t data[8];
};
struct Heuristic {
  Algo algo;
  size_t workspace_size;
  Status state;
  float waves;
  int reserved[4];
};
constexpr int kComputeF32 = 68;  // CUBLAS_COMPUTE_32F
constexpr int kR32F = 0;         // CUDA_R_32F
constexpr int kR16BF = 14;       // CUDA_R_16BF
constexpr int kR8FE4M3 = 28;     // CUDA_R_8F_E4M3
// cublasLtMatmulDescAttributes_t scale attributes and cublasLtMatmulMatrixScale_t values
// (cuBLASLt 12.9+; an older library refuses the mode attributes, and matmul_fp8 then reports
// no algorithm).
constexpr int kDescAScalePointer = 17, kDescBScalePointer = 18;
constexpr int kDescAScaleMode = 31, kDescBScaleMode = 32;
constexpr int32_t kScaleOuterVec32F = 3, kScaleVec128_32F = 4, kScaleBlk128x128_32F = 5;
constexpr int kOpN = 0, kOpT = 1;
constexpr int kDescTransA = 3, kDescTransB = 4, kDescEpilogue = 7, kDescBiasPointer = 8;
constexpr uint32_t kEpilogueDefault = 1, kEpilogueBias = 4;
constexpr int kPrefMaxWorkspace = 1;
}  // namespace lt

struct CublasLt::Api {
  lt::Status (*create)(lt::Handle*) = nullptr;
  lt::Status (*destroy)(lt::Handle) = nullptr;
  size_t (*get_version)() = nullptr;
  lt::Status (*desc_create)(lt::Desc*, int, int) = nullptr;
  lt::Status (*desc_destroy)(lt::Desc) = nullptr;
  lt::Status (*desc_set)(lt::Desc, int, const void*, size_t) = nullptr;
  lt::Status (*layout_create)(lt::Layout*, int, uint64_t, uint64_t, int64_t) = nullptr;
  lt::Status (*layout_destroy)(lt::Layout) = nullptr;
  lt::Status (*pref_create)(lt::Pref*) = nullptr;
  lt::Status (*pref_destroy)(lt::Pref) = nullptr;
  lt::Status (*pref_set)(lt::Pref, int, const void*, size_t) = nullptr;
  lt::Status (*heuristic)(lt::Handle, lt::Desc, lt::Layout, lt::Layout, lt::Layout, lt::Layout, lt::Pref, int,
                          lt::Heuristic*, int*) = nullptr;
  lt::Status (*matmul)(lt::Handle, lt::Desc, const void*, const void*, lt::Layout, const void*, lt::Layout,
                       const void*, const void*, lt::Layout, void*, lt::Layout, const lt::Algo*, void*, size_t,
                       void*) = nullptr;
};

struct CublasLt::Plan {
  bool ok = false;
  lt::Desc desc = nullptr;
  lt::Layout a = nullptr, b = nullptr, c = nullptr;
  lt::Algo algo{};
};

namespace {

std::vector<std::string> candidates() {
  std::vector<std::string> out;
  if (const char* env = std::getenv("TANDEM_CUBLASLT")) out.push_back(env);
  out.push_back("libcublasLt.so.13");
  out.push_back("libcublasLt.so.12");
  const char* patterns[] = {
      "/usr/local/cuda/lib64/libcublasLt.so.1[23]",
      "/usr/local/cuda-1[23]*/lib64/libcublasLt.so.1[23]",
      "/usr/local/cuda/targets/x86_64-linux/lib/libcublasLt.so.1[23]",
      "/opt/*/.venv/lib/python3*/site-packages/nvidia/cu1[23]/lib/libcublasLt.so.1[23]",
      "/opt/*/.venv/lib/python3*/site-packages/nvidia/cublas/lib/libcublasLt.so.1[23]",
      "/usr/local/lib/python3*/dist-packages/nvidia/cu1[23]/lib/libcublasLt.so.1[23]",
      "/usr/local/lib/python3*/dist-packages/nvidia/cublas/lib/libcublasLt.so.1[23]",
      "/usr/lib/python3*/site-packages/nvidia/cublas/lib/libcublasLt.so.1[23]",
  };
  for (const char* p : patterns) {
    glob_t g{};
    if (::glob(p, 0, nullptr, &g) == 0) {
      for (size_t i = 0; i < g.gl_pathc; ++i) out.push_back(g.gl_pathv[i]);
    }
    ::globfree(&g);
  }
  return out;
}

template <typename F>
bool bind(void* lib, const char* name, F& fn) {
  fn = reinterpret_cast<F>(::dlsym(lib, name));
  return fn != nullptr;
}

}  // namespace

std::unique_ptr<CublasLt> CublasLt::open(std::string* why) {
  std::string tried;
  for (const std::string& path : candidates()) {
    void* lib = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      tried += (tried.empty() ? "" : ", ") + path;
      continue;
    }
    auto api = std::make_unique<Api>();
    const bool all = bind(lib, "cublasLtCreate", api->create) && bind(lib, "cublasLtDestroy", api->destroy) &&
                     bind(lib, "cublasLtGetVersion", api->get_version) &&
                     bind(lib, "cublasLtMatmulDescCreate", api->desc_create) &&
                     bind(lib, "cublasLtMatmulDescDestroy", api->desc_destroy) &&
                     bind(lib, "cublasLtMatmulDescSetAttribute", api->desc_set) &&
                     bind(lib, "cublasLtMatrixLayoutCreate", api->layout_create) &&
                     bind(lib, "cublasLtMatrixLayoutDestroy", api->layout_destroy) &&
                     bind(lib, "cublasLtMatmulPreferenceCreate", api->pref_create) &&
                     bind(lib, "cublasLtMatmulPreferenceDestroy", api->pref_destroy) &&
                     bind(lib, "cublasLtMatmulPreferenceSetAttribute", api->pref_set) &&
                     bind(lib, "cublasLtMatmulAlgoGetHeuristic", api->heuristic) && bind(lib, "cublasLtMatmul", api->matmul);
    lt::Handle handle = nullptr;
    if (!all || api->create(&handle) != 0) {
      tried += (tried.empty() ? "" : ", ") + path + (all ? " (cublasLtCreate failed)" : " (missing symbols)");
      ::dlclose(lib);
      continue;
    }
    std::unique_ptr<CublasLt> out(new CublasLt());
    out->lib_ = lib;
    out->handle_ = handle;
    out->version_ = api->get_version();
    out->api_ = std::move(api);
    out->path_ = path;
    return out;
  }
  if (why != nullptr) *why = "cuBLASLt not found (tried " + tried + "; set TANDEM_CUBLASLT to its path)";
  return nullptr;
}

CublasLt::~CublasLt() {
  if (api_) {
    auto destroy = [&](Plan* p) {
      if (p->desc != nullptr) api_->desc_destroy(p->desc);
      if (p->a != nullptr) api_->layout_destroy(p->a);
      if (p->b != nullptr) api_->layout_destroy(p->b);
      if (p->c != nullptr) api_->layout_destroy(p->c);
    };
    for (auto& [key, p] : plans_) destroy(p.get());
    for (auto& [key, p] : fp8_plans_) destroy(p.get());
    if (handle_ != nullptr) api_->destroy(handle_);
  }
  if (lib_ != nullptr) ::dlclose(lib_);
}

CublasLt::Plan* CublasLt::plan_for(const GemmArgs& g, size_t workspace_bytes) {
  const Key key{g.m, g.n, g.k, g.lda, g.ldw, g.ldc, static_cast<int>(g.out), g.accumulate, g.bias != nullptr};
  auto it = plans_.find(key);
  if (it != plans_.end()) return it->second.get();
  auto plan = std::make_unique<Plan>();
  Plan* p = plan.get();
  plans_.emplace(key, std::move(plan));
  const int out_type = g.out == GemmOut::kF32 ? lt::kR32F : lt::kR16BF;
  if (api_->desc_create(&p->desc, lt::kComputeF32, lt::kR32F) != 0) return p;
  const int32_t ta = lt::kOpT, tb = lt::kOpN;
  api_->desc_set(p->desc, lt::kDescTransA, &ta, sizeof(ta));
  api_->desc_set(p->desc, lt::kDescTransB, &tb, sizeof(tb));
  const uint32_t epilogue = g.bias != nullptr ? lt::kEpilogueBias : lt::kEpilogueDefault;
  api_->desc_set(p->desc, lt::kDescEpilogue, &epilogue, sizeof(epilogue));
  if (g.bias != nullptr) api_->desc_set(p->desc, lt::kDescBiasPointer, &g.bias, sizeof(g.bias));
  finish_plan(p, lt::kR16BF, out_type, g.m, g.n, g.k, g.lda, g.ldw, g.ldc, workspace_bytes);
  return p;
}

void CublasLt::finish_plan(Plan* p, int in_type, int out_type, int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldw,
                           int64_t ldc, size_t workspace_bytes) {
  // Column-major views: W is k x n (ld ldw), A is k x m (ld lda), C/D are n x m (ld ldc).
  if (api_->layout_create(&p->a, in_type, static_cast<uint64_t>(k), static_cast<uint64_t>(n), ldw) != 0 ||
      api_->layout_create(&p->b, in_type, static_cast<uint64_t>(k), static_cast<uint64_t>(m), lda) != 0 ||
      api_->layout_create(&p->c, out_type, static_cast<uint64_t>(n), static_cast<uint64_t>(m), ldc) != 0) {
    return;
  }
  lt::Pref pref = nullptr;
  if (api_->pref_create(&pref) != 0) return;
  const uint64_t ws = workspace_bytes;
  api_->pref_set(pref, lt::kPrefMaxWorkspace, &ws, sizeof(ws));
  lt::Heuristic result[1];
  int found = 0;
  const lt::Status s = api_->heuristic(handle_, p->desc, p->a, p->b, p->c, p->c, pref, 1, result, &found);
  api_->pref_destroy(pref);
  if (s == 0 && found > 0 && result[0].state == 0) {
    p->algo = result[0].algo;
    p->ok = true;
  }
}

bool CublasLt::matmul(const GemmArgs& g, void* workspace, size_t workspace_bytes, void* stream) {
  if (g.bias != nullptr && g.out != GemmOut::kF32) return false;  // bias must have D's type
  if (g.accumulate && g.out != GemmOut::kF32) return false;
  Plan* p = plan_for(g, workspace_bytes);
  if (!p->ok) return false;
  if (g.bias != nullptr) api_->desc_set(p->desc, lt::kDescBiasPointer, &g.bias, sizeof(g.bias));
  const float alpha = 1.0f, beta = g.accumulate ? 1.0f : 0.0f;
  const lt::Status s = api_->matmul(handle_, p->desc, &alpha, g.w, p->a, g.a, p->b, &beta, g.c, p->c, g.c, p->c, &p->algo,
                                    workspace, workspace_bytes, stream);
  return s == 0;
}

CublasLt::Plan* CublasLt::fp8_plan_for(const Fp8Args& a, Fp8Scale mode, size_t workspace_bytes) {
  const Fp8Key key{a.m, a.n, a.k, a.lda, a.ldw, a.ldc, static_cast<int>(a.out), a.accumulate, static_cast<int>(mode)};
  auto it = fp8_plans_.find(key);
  if (it != fp8_plans_.end()) return it->second.get();
  auto plan = std::make_unique<Plan>();
  Plan* p = plan.get();
  fp8_plans_.emplace(key, std::move(plan));
  // D and C share a type: f32 (accumulating into the residual, or f32 q/k/v) or bf16.
  const int out_type = a.out == GemmOut::kF32 ? lt::kR32F : lt::kR16BF;
  if (api_->desc_create(&p->desc, lt::kComputeF32, lt::kR32F) != 0) return p;
  const int32_t ta = lt::kOpT, tb = lt::kOpN;
  api_->desc_set(p->desc, lt::kDescTransA, &ta, sizeof(ta));
  api_->desc_set(p->desc, lt::kDescTransB, &tb, sizeof(tb));
  const int32_t a_mode = mode == Fp8Scale::kOuterVec ? lt::kScaleOuterVec32F : lt::kScaleBlk128x128_32F;
  const int32_t b_mode = mode == Fp8Scale::kOuterVec ? lt::kScaleOuterVec32F : lt::kScaleVec128_32F;
  if (api_->desc_set(p->desc, lt::kDescAScaleMode, &a_mode, sizeof(a_mode)) != 0 ||
      api_->desc_set(p->desc, lt::kDescBScaleMode, &b_mode, sizeof(b_mode)) != 0) {
    return p;  // a library without these modes
  }
  // The heuristic may want the scale pointers set; it does not read them (any aligned address).
  alignas(16) static const float kProbeScale = 1.0f;
  const float* sp = &kProbeScale;
  api_->desc_set(p->desc, lt::kDescAScalePointer, &sp, sizeof(sp));
  api_->desc_set(p->desc, lt::kDescBScalePointer, &sp, sizeof(sp));
  finish_plan(p, lt::kR8FE4M3, out_type, a.m, a.n, a.k, a.lda, a.ldw, a.ldc, workspace_bytes);
  return p;
}

bool CublasLt::matmul_fp8(const Fp8Args& a, Fp8Scale mode, void* workspace, size_t workspace_bytes, void* stream) {
  if (a.k % 16 != 0 || a.lda % 16 != 0 || a.ldw % 16 != 0) return false;  // FP8 tensor cores: 16-byte rows
  Plan* p = fp8_plan_for(a, mode, workspace_bytes);
  if (!p->ok) return false;
  // cuBLASLt's A is our weights, its B our activations.
  api_->desc_set(p->desc, lt::kDescAScalePointer, &a.w_scales, sizeof(a.w_scales));
  api_->desc_set(p->desc, lt::kDescBScalePointer, &a.a_scales, sizeof(a.a_scales));
  const float alpha = 1.0f, beta = a.accumulate ? 1.0f : 0.0f;
  return api_->matmul(handle_, p->desc, &alpha, a.w, p->a, a.a, p->b, &beta, a.c, p->c, a.c, p->c, &p->algo, workspace,
                      workspace_bytes, stream) == 0;
}

bool CublasLt::fp8_supported(Fp8Scale mode, size_t workspace_bytes) {
  Fp8Args probe;
  probe.m = 256;
  probe.n = 1024;
  probe.k = 1024;
  probe.lda = probe.ldw = 1024;
  probe.ldc = 1024;
  return fp8_plan_for(probe, mode, workspace_bytes)->ok;
}

}  // namespace tandem::gpu

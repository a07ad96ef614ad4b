#include "safetensors.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "../cuda/fp8.h"
#include "error.h"
#include "json.h"

namespace tandem {

class MappedFile {
 public:
  explicit MappedFile(const std::string& path) : path_(path) {
    // O_NONBLOCK: opening a FIFO with no writer returns at once instead of hanging the thread.
    int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) throw NativeError(ErrorCode::kNotFound, path + ": cannot open");
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
      ::close(fd);
      throw NativeError(ErrorCode::kNotFound, path + ": cannot stat");
    }
    // Only a regular file has a size to check offsets against (a symlink to /dev/zero, a FIFO,
    // a directory named *.safetensors: refused before anything is mapped or read).
    if (!S_ISREG(st.st_mode)) {
      ::close(fd);
      throw NativeError(ErrorCode::kConfigInvalid, path + ": not a regular file");
    }
    size_ = static_cast<size_t>(st.st_size);
    if (size_ > 0) {
      void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
      if (p == MAP_FAILED) {
        ::close(fd);
        throw NativeError(ErrorCode::kInternal, path + ": mmap failed");
      }
      data_ = static_cast<const uint8_t*>(p);
    }
    ::close(fd);
  }
  ~MappedFile() {
    if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
  }
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

const char* dtype_name(DType t) {
  switch (t) {
    case DType::kF32: return "F32";
    case DType::kF16: return "F16";
    case DType::kBF16: return "BF16";
    case DType::kF8E4M3: return "F8_E4M3";
    case DType::kF8E5M2: return "F8_E5M2";
  }
  return "?";
}

size_t TensorView::num_elements() const {
  size_t n = 1;
  for (int64_t d : shape) n *= static_cast<size_t>(d);
  return n;
}

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

std::unique_ptr<SafetensorsStore> SafetensorsStore::open_dir(const std::string& model_dir) {
  std::unique_ptr<SafetensorsStore> store(new SafetensorsStore());
  store->dir_ = model_dir;
  DIR* d = ::opendir(model_dir.c_str());
  if (d == nullptr) throw NativeError(ErrorCode::kNotFound, model_dir + ": model directory not found");
  std::vector<std::string> names;
  while (dirent* e = ::readdir(d)) {
    std::string n = e->d_name;
    const std::string ext = ".safetensors";
    if (n.size() > ext.size() && n.compare(n.size() - ext.size(), ext.size(), ext) == 0) {
      names.push_back(n);
    }
  }
  ::closedir(d);
  if (names.empty()) {
    throw NativeError(ErrorCode::kNotFound, model_dir + ": no *.safetensors weight files");
  }
  std::sort(names.begin(), names.end());
  for (const auto& n : names) store->add_file(model_dir + "/" + n);
  return store;
}

std::unique_ptr<SafetensorsStore> SafetensorsStore::from_views(std::vector<TensorView> views) {
  std::unique_ptr<SafetensorsStore> store(new SafetensorsStore());
  store->dir_ = "(memory)";
  for (TensorView& v : views) {
    std::string name = v.name;
    store->tensors_[name] = std::move(v);
  }
  return store;
}

SafetensorsStore::~SafetensorsStore() = default;

void SafetensorsStore::add_file(const std::string& path) {
  auto file = std::make_unique<MappedFile>(path);
  auto bad = [&](const std::string& what) {
    throw NativeError(ErrorCode::kConfigInvalid, path + ": invalid safetensors file (" + what + ")");
  };
  if (file->size() < 8) bad("shorter than its header length");
  uint64_t header_len = 0;
  std::memcpy(&header_len, file->data(), 8);  // little-endian on every host we build for
  if (header_len > file->size() - 8) bad("header length past end of file");
  // The header is copied and parsed: a corrupt length must not cost gigabytes first.
  if (header_len > kMaxSafetensorsHeaderBytes) bad("header length " + std::to_string(header_len) + " over the limit");
  std::string header(reinterpret_cast<const char*>(file->data()) + 8, header_len);
  Json root = Json::parse(header, path);
  if (!root.is_object()) bad("header is not an object");
  const uint8_t* base = file->data() + 8 + header_len;
  const size_t data_size = file->size() - 8 - header_len;

  for (const auto& [name, meta] : root.members()) {
    if (name == "__metadata__") continue;
    const Json* dtype = meta.find("dtype");
    const Json* shape = meta.find("shape");
    const Json* offsets = meta.find("data_offsets");
    if (dtype == nullptr || !dtype->is_string() || shape == nullptr || !shape->is_array() ||
        offsets == nullptr || !offsets->is_array() || offsets->items().size() != 2) {
      bad("tensor '" + name + "' lacks dtype/shape/data_offsets");
    }
    TensorView v;
    v.name = name;
    v.file = path;
    const std::string& dt = dtype->as_string();
    size_t elem = 0;
    if (dt == "F32") { v.dtype = DType::kF32; elem = 4; }
    else if (dt == "F16") { v.dtype = DType::kF16; elem = 2; }
    else if (dt == "BF16") { v.dtype = DType::kBF16; elem = 2; }
    else if (dt == "F8_E4M3") { v.dtype = DType::kF8E4M3; elem = 1; }
    else if (dt == "F8_E5M2") { v.dtype = DType::kF8E5M2; elem = 1; }
    else {
      // Other dtypes (I64 buffers, GPTQ/AWQ int packs) are only an error if a weight we need uses them.
      continue;
    }
    for (const Json& d : shape->items()) {
      if (!d.is_number() || d.as_number() < 0) bad("tensor '" + name + "' has a bad shape");
      v.shape.push_back(static_cast<int64_t>(d.as_number()));
    }
    double begin = offsets->items()[0].as_number();
    double end = offsets->items()[1].as_number();
    if (begin < 0 || end < begin || end > static_cast<double>(data_size)) {
      bad("tensor '" + name + "' data_offsets outside the file");
    }
    if (static_cast<size_t>(end - begin) != v.num_elements() * elem) {
      bad("tensor '" + name + "' byte size does not match its shape and dtype");
    }
    v.data = base + static_cast<size_t>(begin);
    tensors_[name] = std::move(v);
  }
  files_.push_back(std::move(file));
}

std::vector<const TensorView*> SafetensorsStore::tensors() const {
  std::vector<const TensorView*> out;
  out.reserve(tensors_.size());
  for (const auto& [name, t] : tensors_) out.push_back(&t);
  return out;
}

const TensorView* SafetensorsStore::find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

const TensorView& SafetensorsStore::require(const std::string& name,
                                            const std::vector<int64_t>& shape) const {
  const TensorView* t = find(name);
  if (t == nullptr) {
    throw NativeError(ErrorCode::kNotFound,
                      dir_ + ": tensor '" + name + "' missing from the safetensors files");
  }
  if (t->shape != shape) {
    throw NativeError(ErrorCode::kConfigInvalid, t->file + ": tensor '" + name + "' has shape " +
                                                     shape_string(t->shape) + ", config.json implies " +
                                                     shape_string(shape));
  }
  return *t;
}

namespace {

inline float bf16_to_f32(uint16_t h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}


}  // namespace

float f16_to_f32(uint16_t h) {
  uint32_t sign = (h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1Fu;
  uint32_t mant = h & 0x3FFu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: renormalize
      exp = 127 - 15 + 1;
      while ((mant & 0x400u) == 0) {
        mant <<= 1;
        --exp;
      }
      mant &= 0x3FFu;
      bits = sign | (exp << 23) | (mant << 13);
    }
  } else if (exp == 0x1F) {
    bits = sign | 0x7F800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

void convert_to_f32(const TensorView& t, float* out) {
  const size_t n = t.num_elements();
  switch (t.dtype) {
    case DType::kF32:
      std::memcpy(out, t.data, n * 4);
      return;
    case DType::kBF16: {
      const uint8_t* p = t.data;
      for (size_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        out[i] = bf16_to_f32(h);
      }
      return;
    }
    case DType::kF16: {
      const uint8_t* p = t.data;
      for (size_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        out[i] = f16_to_f32(h);
      }
      return;
    }
    case DType::kF8E4M3:
      for (size_t i = 0; i < n; ++i) out[i] = gpu::fp8_bits_to_float(t.data[i]);
      return;
    case DType::kF8E5M2:
      throw NativeError(ErrorCode::kConfigInvalid, t.file + ": tensor '" + t.name +
                                                       "' has dtype F8_E5M2 (FP8 weights must be F8_E4M3)");
  }
}

}  // namespace tandem

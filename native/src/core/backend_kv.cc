// Backend's KV movement defaults: a backend that does not implement them says so.
#include "backend.h"
#include "error.h"

namespace tandem {

namespace {
[[noreturn]] void unsupported(const Backend& b, const char* what) {
  throw NativeError(ErrorCode::kUnavailable, std::string(what) + ": backend '" + b.name() + "' does not support it");
}
}  // namespace

void Backend::kv_read_blocks(const int32_t*, int32_t, void*, int, int) { unsupported(*this, "kvReadBlocks"); }
void Backend::kv_write_blocks(const int32_t*, int32_t, const void*, const KvLayout&, int64_t, int, int, int64_t) {
  unsupported(*this, "kvWriteBlocks");
}
void* Backend::kv_open_peer(const std::string&, size_t) { unsupported(*this, "kvOpenPeer"); }
void Backend::kv_close_peer(void*) {}
void Backend::kv_copy_from_peer(void*, const KvLayout&, const int32_t*, int32_t, const int32_t*, int32_t, int, int, int64_t) {
  unsupported(*this, "kvCopyFromPeer");
}

}  // namespace tandem

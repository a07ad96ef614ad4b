// The device-independent half of KV pool export (device.h): the handle's header, and the
// defaults of devices that cannot export.
#include <string>

#include "../core/error.h"
#include "device.h"

namespace tandem::gpu {

namespace {
constexpr const char* kMagic = "tandem-kv-ipc/1";
}

std::string ipc_handle_header(const char* kind, size_t bytes) {
  return std::string(kMagic) + " " + kind + " " + std::to_string(bytes) + "\n";
}

std::string ipc_handle_payload(const std::string& handle, const char* kind, size_t bytes) {
  const size_t nl = handle.find('\n');
  if (handle.rfind(kMagic, 0) != 0 || nl == std::string::npos) {
    throw NativeError(ErrorCode::kInvalidArgument, "kvOpenPeer: not a KV pool handle");
  }
  const std::string header = handle.substr(0, nl + 1);
  if (header != ipc_handle_header(kind, bytes)) {
    throw NativeError(ErrorCode::kInvalidArgument, "kvOpenPeer: the handle says '" + handle.substr(0, nl) + "', this " +
                                                       kind + " device expects a " + kind + " pool of " +
                                                       std::to_string(bytes) + " bytes");
  }
  return handle.substr(nl + 1);
}

void* Device::make_exportable(void*, size_t) {
  throw NativeError(ErrorCode::kUnavailable, std::string("device '") + kind() + "' cannot export memory");
}
std::string Device::export_handle(void*, size_t) {
  throw NativeError(ErrorCode::kUnavailable, std::string("device '") + kind() + "' cannot export memory");
}
void* Device::open_ipc(const std::string&, size_t) {
  throw NativeError(ErrorCode::kUnavailable, std::string("device '") + kind() + "' cannot map a peer's memory");
}
void Device::close_ipc(void*) noexcept {}

}  // namespace tandem::gpu

// Private to the agent's .cc files: the per-peer and per-batch state both halves share, and
// the UCX status mapping. Progress-thread only.
#pragma once

#include <string>
#include <unordered_map>
#include <unordered_set>

#include "ucx_agent.h"

namespace tandem::ucx {

// A UCX status on a get or an endpoint, as a runtime/errors.ts code: anything that means
// "the peer is gone or unreachable" is 'unavailable'.
inline ErrorKind KindOf(ucs_status_t status) {
  switch (status) {
    case UCS_ERR_CONNECTION_RESET:
    case UCS_ERR_ENDPOINT_TIMEOUT:
    case UCS_ERR_UNREACHABLE:
    case UCS_ERR_CANCELED:
    case UCS_ERR_IO_ERROR:
    case UCS_ERR_REJECTED:
    case UCS_ERR_NOT_CONNECTED:
    case UCS_ERR_TIMED_OUT:
      return ErrorKind::kUnavailable;
    default:
      return ErrorKind::kInternal;
  }
}

inline std::string Describe(const char* what, ucs_status_t status) {
  return std::string(what) + ": " + ucs_status_string(status);
}

struct UcxAgent::Peer {
  UcxAgent* agent = nullptr;
  std::string address;
  ucp_ep_h ep = nullptr;
  std::unordered_map<std::string, ucp_rkey_h> rkeys;
  std::unordered_set<Batch*> batches;
  bool failed = false;      // out of peers_, close requested or done
  bool close_done = false;
};

struct UcxAgent::Batch {
  uint64_t id = 0;
  Peer* peer = nullptr;
  uint32_t pending = 0;
  uint64_t bytes = 0;
  Status status;
  uint64_t region = 0;  // local region id the gets write into; 0 before any get
  ReadCallback done;
  Clock::time_point start;
  Clock::time_point deadline = Clock::time_point::max();
};

}  // namespace tandem::ucx

#include "ucx_agent.h"

#include <sys/epoll.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <future>
#include <unordered_set>

namespace tandem::ucx {

namespace {

constexpr auto kCloseGrace = std::chrono::seconds(2);
// Defaults that differ from UCX's, applied unless the matching UCX_* variable is set.
struct ConfigDefault {
  const char* name;
  const char* value;
  bool mm_only;  // only meaningful when a shared-memory (mm) transport is enabled
};
constexpr ConfigDefault kConfigDefaults[] = {
    // Every endpoint uses err_mode PEER (a dead peer must fail its reads, not hang them).
    // UCX 1.13's shared-memory transports (posix, sysv) only offer that when asked to;
    // without it UCX_TLS=sm has no usable transport at all.
    {"MM_ERROR_HANDLING", "y", true},
    // Keep-alive decides how fast a dead peer on a socket-less transport (shm) is noticed;
    // UCX's default is 20 s, far above a transfer's budget.
    {"KEEPALIVE_INTERVAL", "1s", false},
};

// Whether a UCX_TLS value enables posix/sysv. A transport option that no enabled transport
// reads makes UCX print "invalid configuration" at worker creation, so mm-only defaults are
// skipped for, say, UCX_TLS=tcp.
bool TlsIncludesMm(const std::string& tls) {
  if (tls.empty() || tls == "all") return true;
  const bool exclude = tls[0] == '^';
  bool named = false;
  size_t start = exclude ? 1 : 0;
  while (start <= tls.size()) {
    size_t end = tls.find(',', start);
    if (end == std::string::npos) end = tls.size();
    const std::string name = tls.substr(start, end - start);
    if (name == "sm" || name == "shm" || name == "mm" || name == "posix" || name == "sysv") named = true;
    start = end + 1;
  }
  return exclude ? !named : named;
}

ErrorKind KindOf(ucs_status_t status) {
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

std::string Describe(const char* what, ucs_status_t status) {
  return std::string(what) + ": " + ucs_status_string(status);
}

}  // namespace

const char* ErrorCodeName(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kNone: return "ok";
    case ErrorKind::kUnavailable: return "unavailable";
    case ErrorKind::kInvalidArgument: return "invalid_argument";
    case ErrorKind::kDeadlineExceeded: return "deadline_exceeded";
    case ErrorKind::kInternal: return "internal";
  }
  return "internal";
}

std::vector<Range> CoalesceRanges(const std::vector<Range>& ranges) {
  std::vector<Range> out;
  out.reserve(ranges.size());
  for (const Range& r : ranges) {
    if (r.length == 0) continue;
    if (!out.empty()) {
      Range& last = out.back();
      if (last.remote_offset + last.length == r.remote_offset &&
          last.local_offset + last.length == r.local_offset) {
        last.length += r.length;
        continue;
      }
    }
    out.push_back(r);
  }
  return out;
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
  ReadCallback done;
  Clock::time_point start;
  Clock::time_point deadline = Clock::time_point::max();
};

std::unique_ptr<UcxAgent> UcxAgent::Create(const AgentOptions& options, Status* error) {
  std::unique_ptr<UcxAgent> agent(new UcxAgent());
  Status status = agent->Init(options);
  if (!status.ok()) {
    *error = status;
    return nullptr;
  }
  return agent;
}

UcxAgent::~UcxAgent() { Close(); }

Status UcxAgent::Init(const AgentOptions& options) {
  busy_poll_us_ = options.busy_poll_us;
  max_get_bytes_ = options.max_get_bytes;
  // The worker is created on the progress thread so that every UCX call on it comes from
  // one thread (thread mode SINGLE, no locks inside UCX).
  std::promise<Status> ready;
  auto ready_future = ready.get_future();
  thread_ = std::thread([this, &options, &ready] {
    ucp_config_t* config = nullptr;
    ucs_status_t st = ucp_config_read(nullptr, nullptr, &config);
    if (st != UCS_OK) {
      ready.set_value(Status::Error(ErrorKind::kInternal, Describe("ucp_config_read", st)));
      return;
    }
    std::string tls = std::getenv("UCX_TLS") != nullptr ? std::getenv("UCX_TLS") : "";
    for (const auto& [name, value] : options.config) {
      if (name == "TLS") tls = value;
    }
    for (const ConfigDefault& d : kConfigDefaults) {
      if (d.mm_only && !TlsIncludesMm(tls)) continue;
      if (std::getenv((std::string("UCX_") + d.name).c_str()) == nullptr) {
        ucp_config_modify(config, d.name, d.value);  // best effort: an older UCX may lack it
      }
    }
    for (const auto& [name, value] : options.config) {
      st = ucp_config_modify(config, name.c_str(), value.c_str());
      if (st != UCS_OK) {
        ucp_config_release(config);
        ready.set_value(Status::Error(ErrorKind::kInvalidArgument,
                                      Describe(("UCX config " + name + "=" + value).c_str(), st)));
        return;
      }
    }
    ucp_params_t params{};
    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    params.features = UCP_FEATURE_RMA | UCP_FEATURE_WAKEUP;
    st = ucp_init(&params, config, &context_);
    ucp_config_release(config);
    if (st != UCS_OK) {
      context_ = nullptr;
      ready.set_value(Status::Error(ErrorKind::kInternal, Describe("ucp_init", st)));
      return;
    }
    ucp_worker_params_t wparams{};
    wparams.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wparams.thread_mode = UCS_THREAD_MODE_SINGLE;
    st = ucp_worker_create(context_, &wparams, &worker_);
    if (st != UCS_OK) {
      worker_ = nullptr;
      ucp_cleanup(context_);
      context_ = nullptr;
      ready.set_value(Status::Error(ErrorKind::kInternal, Describe("ucp_worker_create", st)));
      return;
    }
    ucp_context_attr_t cattr{};
    cattr.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES;
    if (ucp_context_query(context_, &cattr) == UCS_OK) {
      cuda_supported_ = (cattr.memory_types & UCS_BIT(UCS_MEMORY_TYPE_CUDA)) != 0;
    }
    ucp_address_t* addr = nullptr;
    size_t addr_len = 0;
    st = ucp_worker_get_address(worker_, &addr, &addr_len);
    if (st == UCS_OK) {
      address_.assign(reinterpret_cast<const char*>(addr), addr_len);
      ucp_worker_release_address(worker_, addr);
      st = ucp_worker_get_efd(worker_, &event_fd_);
    }
    if (st == UCS_OK) {
      epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
      epoll_event ev{};
      ev.events = EPOLLIN;
      if (epoll_fd_ < 0 || epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, event_fd_, &ev) != 0) {
        st = UCS_ERR_IO_ERROR;
      }
    }
    if (st != UCS_OK) {
      Teardown();
      ready.set_value(Status::Error(ErrorKind::kInternal, Describe("worker setup", st)));
      return;
    }
    running_ = true;
    ready.set_value(Status::Ok());
    ProgressLoop();
    Teardown();
  });
  Status status = ready_future.get();
  if (!status.ok()) {
    thread_.join();
    closed_ = true;
  }
  return status;
}

void UcxAgent::Teardown() {
  if (epoll_fd_ >= 0) close(epoll_fd_);
  epoll_fd_ = -1;
  if (worker_ != nullptr) ucp_worker_destroy(worker_);
  worker_ = nullptr;
  if (context_ != nullptr) ucp_cleanup(context_);
  context_ = nullptr;
}

void UcxAgent::Post(std::function<void()> fn) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    commands_.push_back(std::move(fn));
  }
  ucp_worker_signal(worker_);
}

bool UcxAgent::RunSync(std::function<void()> fn) {
  if (!running_) return false;
  std::promise<void> done;
  auto future = done.get_future();
  Post([&] {
    fn();
    done.set_value();
  });
  future.wait();
  return true;
}

bool UcxAgent::DrainCommands() {
  std::deque<std::function<void()>> batch;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    batch.swap(commands_);
  }
  for (auto& fn : batch) fn();
  return !batch.empty();
}

void UcxAgent::ProgressLoop() {
  auto last_event = Clock::now();
  const auto busy_poll = std::chrono::microseconds(busy_poll_us_);
  while (!exit_loop_) {
    bool active = DrainCommands();
    // Bounded so that queued commands are not starved by a long transfer.
    for (int i = 0; i < 64 && ucp_worker_progress(worker_) != 0; ++i) active = true;
    if (!closing_.empty()) ReapClosing();
    if (!batches_.empty()) CheckDeadlines();
    const auto now = Clock::now();
    if (active) {
      last_event = now;
      continue;
    }
    // Poll on for a moment after the last event, on both ends: a get is served by the
    // target's progress too (tcp and active-message emulation), and a sleep/wake per
    // fragment would cap bandwidth far below the link.
    if (now - last_event < busy_poll) continue;
    const ucs_status_t st = ucp_worker_arm(worker_);
    if (st == UCS_ERR_BUSY) continue;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!commands_.empty()) continue;
    }
    epoll_event ev{};
    epoll_wait(epoll_fd_, &ev, 1, NextTimeoutMs());
    last_event = Clock::now();
  }
}

int UcxAgent::NextTimeoutMs() const {
  // Deadlines and endpoints still closing need a tick even when nothing arrives.
  if (!closing_.empty()) return 10;
  auto next = Clock::time_point::max();
  for (const auto& [id, batch] : batches_) next = std::min(next, batch->deadline);
  if (next == Clock::time_point::max()) return -1;
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(next - Clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(ms + 1, 0, 1000));
}

Status UcxAgent::RegisterMemory(void* ptr, uint64_t length, MemoryKind kind, Region* out) {
  if (ptr == nullptr || length == 0) {
    return Status::Error(ErrorKind::kInvalidArgument, "cannot register an empty buffer");
  }
  return MapMemory(ptr, length, kind, out);
}

Status UcxAgent::AllocateMemory(uint64_t length, Region* out) {
  if (length == 0) return Status::Error(ErrorKind::kInvalidArgument, "cannot allocate 0 bytes");
  return MapMemory(nullptr, length, MemoryKind::kHost, out);
}

Status UcxAgent::MapMemory(void* ptr, uint64_t length, MemoryKind kind, Region* out) {
  if (kind == MemoryKind::kCuda && !cuda_supported_) {
    // Device-memory seam: without a CUDA transport the caller stages through pinned host
    // buffers (or CUDA IPC on one node); see README.md "Device memory".
    return Status::Error(ErrorKind::kInvalidArgument,
                         "this UCX build has no CUDA memory support: register a pinned host staging buffer");
  }
  Status status;
  const bool ran = RunSync([&] {
    ucp_mem_map_params_t params{};
    params.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                        UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE | UCP_MEM_MAP_PARAM_FIELD_FLAGS;
    params.address = ptr;
    params.length = length;
    params.memory_type = kind == MemoryKind::kCuda ? UCS_MEMORY_TYPE_CUDA : UCS_MEMORY_TYPE_HOST;
    // UCX-allocated memory comes from a shared-memory segment a local peer can map, so a
    // read over shm is one memcpy instead of an active-message copy through FIFOs.
    params.flags = ptr == nullptr ? UCP_MEM_MAP_ALLOCATE : 0;
    ucp_mem_h memh = nullptr;
    ucs_status_t st = ucp_mem_map(context_, &params, &memh);
    if (st != UCS_OK) {
      status = Status::Error(ptr == nullptr ? ErrorKind::kUnavailable : ErrorKind::kInternal,
                             Describe("ucp_mem_map", st));
      return;
    }
    ucp_mem_attr_t attr{};
    attr.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS | UCP_MEM_ATTR_FIELD_LENGTH;
    st = ucp_mem_query(memh, &attr);
    void* rkey_buf = nullptr;
    size_t rkey_len = 0;
    if (st == UCS_OK) st = ucp_rkey_pack(context_, memh, &rkey_buf, &rkey_len);
    if (st != UCS_OK) {
      ucp_mem_unmap(context_, memh);
      status = Status::Error(ErrorKind::kInternal, Describe("ucp_rkey_pack", st));
      return;
    }
    out->id = next_region_id_++;
    out->base = reinterpret_cast<uint64_t>(attr.address);
    out->length = length;
    out->rkey.assign(static_cast<const char*>(rkey_buf), rkey_len);
    ucp_rkey_buffer_release(rkey_buf);
    regions_[out->id] = RegionEntry{memh, out->base, length};
    std::lock_guard<std::mutex> lock(stats_mutex_);
    stats_.regions = static_cast<uint32_t>(regions_.size());
  });
  if (!ran) return Status::Error(ErrorKind::kUnavailable, "UCX agent is closed");
  return status;
}

Status UcxAgent::DeregisterMemory(uint64_t region_id) {
  Status status;
  const bool ran = RunSync([&] {
    auto it = regions_.find(region_id);
    if (it == regions_.end()) {
      status = Status::Error(ErrorKind::kInvalidArgument, "unknown region id");
      return;
    }
    ucp_mem_unmap(context_, it->second.memh);
    regions_.erase(it);
    std::lock_guard<std::mutex> lock(stats_mutex_);
    stats_.regions = static_cast<uint32_t>(regions_.size());
  });
  // A closed agent already unmapped everything.
  (void)ran;
  return status;
}

void UcxAgent::Read(ReadRequest request, ReadCallback done) {
  if (!running_) {
    done(ReadResult{Status::Error(ErrorKind::kUnavailable, "UCX agent is closed"), 0, 0});
    return;
  }
  auto shared = std::make_shared<std::pair<ReadRequest, ReadCallback>>(std::move(request), std::move(done));
  Post([this, shared] { StartRead(shared->first, shared->second); });
}

void UcxAgent::Disconnect(const std::string& peer_address) {
  if (!running_) return;
  Post([this, peer_address] {
    auto it = peers_.find(peer_address);
    if (it != peers_.end()) FailPeer(it->second, ErrorKind::kUnavailable, "endpoint disconnected");
  });
}

AgentStats UcxAgent::Stats() {
  std::lock_guard<std::mutex> lock(stats_mutex_);
  return stats_;
}

void UcxAgent::StartRead(ReadRequest& request, ReadCallback& done) {
  auto* batch = new Batch();
  batch->id = next_batch_id_++;
  batch->done = std::move(done);
  batch->start = Clock::now();
  if (request.timeout_ms > 0) batch->deadline = batch->start + std::chrono::milliseconds(request.timeout_ms);
  batches_[batch->id] = batch;
  batch->pending = 1;  // held until every get is issued

  auto region = regions_.find(request.local_region);
  if (region == regions_.end()) {
    batch->status = Status::Error(ErrorKind::kInvalidArgument, "unknown local region");
  } else {
    for (const Range& r : request.ranges) {
      if (r.local_offset > region->second.length || r.length > region->second.length - r.local_offset) {
        batch->status = Status::Error(ErrorKind::kInvalidArgument, "range outside the local region");
        break;
      }
    }
  }
  Peer* peer = nullptr;
  ucp_rkey_h rkey = nullptr;
  if (batch->status.ok()) peer = GetPeer(request.peer_address, &batch->status);
  if (peer != nullptr) {
    rkey = GetRkey(peer, request.rkey, &batch->status);
    batch->peer = peer;
    peer->batches.insert(batch);
  }
  if (rkey != nullptr) {
    const std::vector<Range> ranges = CoalesceRanges(request.ranges);
    auto* local = reinterpret_cast<uint8_t*>(region->second.base);
    for (const Range& whole : ranges) {
      const uint64_t step = max_get_bytes_ > 0 ? max_get_bytes_ : whole.length;
      for (uint64_t done = 0; done < whole.length && batch->status.ok(); done += step) {
        const uint64_t length = std::min(step, whole.length - done);
        ucp_request_param_t param{};
        param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_MEMH;
        param.cb.send = &UcxAgent::OnGetDone;
        param.user_data = batch;
        param.memh = region->second.memh;
        ucs_status_ptr_t req = ucp_get_nbx(peer->ep, local + whole.local_offset + done, length,
                                           request.remote_base + whole.remote_offset + done, rkey, &param);
        if (UCS_PTR_IS_ERR(req)) {
          const ucs_status_t st = UCS_PTR_STATUS(req);
          batch->status = Status::Error(KindOf(st), Describe("ucp_get_nbx", st));
          break;
        }
        batch->bytes += length;
        if (req != nullptr) ++batch->pending;
      }
      if (!batch->status.ok()) break;
    }
  }
  {
    std::lock_guard<std::mutex> lock(stats_mutex_);
    stats_.inflight_reads = static_cast<uint32_t>(batches_.size());
  }
  if (--batch->pending == 0) FinishBatch(batch);
}

UcxAgent::Peer* UcxAgent::GetPeer(const std::string& address, Status* error) {
  auto it = peers_.find(address);
  if (it != peers_.end()) return it->second;
  auto* peer = new Peer();
  peer->agent = this;
  peer->address = address;
  ucp_ep_params_t params{};
  params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                      UCP_EP_PARAM_FIELD_ERR_HANDLER;
  params.address = reinterpret_cast<const ucp_address_t*>(peer->address.data());
  params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  params.err_handler.cb = &UcxAgent::OnPeerError;
  params.err_handler.arg = peer;
  const ucs_status_t st = ucp_ep_create(worker_, &params, &peer->ep);
  if (st != UCS_OK) {
    delete peer;
    *error = Status::Error(st == UCS_ERR_UNREACHABLE ? ErrorKind::kUnavailable : ErrorKind::kInternal,
                           Describe("ucp_ep_create", st));
    return nullptr;
  }
  peers_[address] = peer;
  std::lock_guard<std::mutex> lock(stats_mutex_);
  stats_.endpoints = static_cast<uint32_t>(peers_.size());
  return peer;
}

ucp_rkey_h UcxAgent::GetRkey(Peer* peer, const std::string& packed, Status* error) {
  if (peer->failed) {
    *error = Status::Error(ErrorKind::kUnavailable, "peer endpoint failed");
    return nullptr;
  }
  auto it = peer->rkeys.find(packed);
  if (it != peer->rkeys.end()) return it->second;
  ucp_rkey_h rkey = nullptr;
  const ucs_status_t st = ucp_ep_rkey_unpack(peer->ep, packed.data(), &rkey);
  if (st != UCS_OK) {
    *error = Status::Error(ErrorKind::kInvalidArgument, Describe("ucp_ep_rkey_unpack", st));
    return nullptr;
  }
  peer->rkeys.emplace(packed, rkey);
  return rkey;
}

void UcxAgent::OnGetDone(void* request, ucs_status_t status, void* user_data) {
  auto* batch = static_cast<Batch*>(user_data);
  if (status != UCS_OK && batch->status.ok()) {
    batch->status = Status::Error(KindOf(status), Describe("ucp_get_nbx", status));
  }
  ucp_request_free(request);
  if (--batch->pending == 0) batch->peer->agent->FinishBatch(batch);
}

void UcxAgent::OnPeerError(void* arg, ucp_ep_h /*ep*/, ucs_status_t status) {
  auto* peer = static_cast<Peer*>(arg);
  UcxAgent* agent = peer->agent;
  {
    std::lock_guard<std::mutex> lock(agent->stats_mutex_);
    ++agent->stats_.peer_failures;
  }
  // Closing an endpoint inside its own error callback is not allowed; mark it now so no new
  // read uses it, close it on the next loop turn.
  agent->MarkFailed(peer, ErrorKind::kUnavailable, Describe("peer failed", status));
  agent->Post([agent, peer] { agent->ClosePeer(peer, true); });
}

void UcxAgent::MarkFailed(Peer* peer, ErrorKind kind, const std::string& why) {
  if (peer->failed) return;
  peer->failed = true;
  auto it = peers_.find(peer->address);
  if (it != peers_.end() && it->second == peer) peers_.erase(it);
  for (Batch* batch : peer->batches) {
    if (batch->status.ok()) batch->status = Status::Error(kind, why);
  }
  std::lock_guard<std::mutex> lock(stats_mutex_);
  stats_.endpoints = static_cast<uint32_t>(peers_.size());
}

void UcxAgent::FailPeer(Peer* peer, ErrorKind kind, const std::string& why) {
  if (peer->failed) return;
  MarkFailed(peer, kind, why);
  ClosePeer(peer, true);
}

void UcxAgent::ClosePeer(Peer* peer, bool force) {
  if (peer->ep == nullptr) return;
  for (auto& [packed, rkey] : peer->rkeys) ucp_rkey_destroy(rkey);
  peer->rkeys.clear();
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  param.flags = force ? UCP_EP_CLOSE_FLAG_FORCE : 0;
  ucs_status_ptr_t req = ucp_ep_close_nbx(peer->ep, &param);
  peer->ep = nullptr;
  if (req != nullptr && !UCS_PTR_IS_ERR(req)) {
    closing_.emplace_back(peer, req);
  } else {
    peer->close_done = true;
    closing_.emplace_back(peer, nullptr);
  }
  ReapClosing();
  std::lock_guard<std::mutex> lock(stats_mutex_);
  stats_.closing_endpoints = static_cast<uint32_t>(closing_.size());
}

void UcxAgent::ReapClosing() {
  for (auto it = closing_.begin(); it != closing_.end();) {
    Peer* peer = it->first;
    if (it->second != nullptr && ucp_request_check_status(it->second) != UCS_INPROGRESS) {
      ucp_request_free(it->second);
      it->second = nullptr;
      peer->close_done = true;
    }
    if (peer->close_done && peer->batches.empty()) {
      delete peer;
      it = closing_.erase(it);
    } else {
      ++it;
    }
  }
  std::lock_guard<std::mutex> lock(stats_mutex_);
  stats_.closing_endpoints = static_cast<uint32_t>(closing_.size());
}

void UcxAgent::CheckDeadlines() {
  const auto now = Clock::now();
  std::vector<uint64_t> expired;
  for (const auto& [id, batch] : batches_) {
    if (batch->deadline <= now) expired.push_back(id);
  }
  for (uint64_t id : expired) {
    // Failing one peer can finish (and free) other expired batches on it.
    auto it = batches_.find(id);
    if (it == batches_.end()) continue;
    Batch* batch = it->second;
    if (batch->status.ok()) {
      batch->status = Status::Error(ErrorKind::kDeadlineExceeded, "read timed out");
    }
    // RMA gets cannot be cancelled one by one: a peer that stops answering is dropped, which
    // completes every get on it (the other reads to it fail 'unavailable').
    batch->deadline = Clock::time_point::max();
    if (batch->peer != nullptr && !batch->peer->failed) {
      FailPeer(batch->peer, ErrorKind::kUnavailable, "peer dropped after a read timed out");
    }
  }
}

void UcxAgent::FinishBatch(Batch* batch) {
  batches_.erase(batch->id);
  if (batch->peer != nullptr) batch->peer->batches.erase(batch);
  ReadResult result;
  result.status = std::move(batch->status);
  result.bytes = result.status.ok() ? batch->bytes : 0;
  result.seconds = std::chrono::duration<double>(Clock::now() - batch->start).count();
  {
    std::lock_guard<std::mutex> lock(stats_mutex_);
    stats_.inflight_reads = static_cast<uint32_t>(batches_.size());
    if (result.status.ok()) {
      ++stats_.reads_ok;
      stats_.bytes_read += result.bytes;
    } else {
      ++stats_.reads_failed;
    }
  }
  ReadCallback done = std::move(batch->done);
  delete batch;
  done(std::move(result));
}

void UcxAgent::Close() {
  {
    std::lock_guard<std::mutex> lock(close_mutex_);
    if (closed_) return;
    closed_ = true;
  }
  RunSync([this] {
    for (auto& [id, batch] : batches_) {
      if (batch->status.ok()) batch->status = Status::Error(ErrorKind::kUnavailable, "UCX agent closed");
    }
    std::vector<Peer*> peers;
    for (auto& [address, peer] : peers_) peers.push_back(peer);
    for (Peer* peer : peers) {
      // A flush close tells the peer we are leaving; force when reads are still in flight
      // (they fail now rather than hold the shutdown).
      const bool force = !peer->batches.empty();
      MarkFailed(peer, ErrorKind::kUnavailable, "UCX agent closed");
      ClosePeer(peer, force);
    }
    const auto give_up = Clock::now() + kCloseGrace;
    while ((!closing_.empty() || !batches_.empty()) && Clock::now() < give_up) {
      ucp_worker_progress(worker_);
      ReapClosing();
    }
    // Batches still here have gets UCX never completed; answer them anyway. Their requests
    // die with the worker below, so the Batch objects are leaked on purpose (no use-after-free).
    std::vector<Batch*> stuck;
    for (auto& [id, batch] : batches_) stuck.push_back(batch);
    for (Batch* batch : stuck) {
      batches_.erase(batch->id);
      ReadCallback done = std::move(batch->done);
      done(ReadResult{Status::Error(ErrorKind::kUnavailable, "UCX agent closed"), 0, 0});
    }
    for (auto& [id, region] : regions_) ucp_mem_unmap(context_, region.memh);
    regions_.clear();
    exit_loop_ = true;
  });
  running_ = false;
  if (thread_.joinable()) thread_.join();
  std::lock_guard<std::mutex> lock(stats_mutex_);
  stats_.endpoints = 0;
  stats_.inflight_reads = 0;
  stats_.regions = 0;
}

}  // namespace tandem::ucx

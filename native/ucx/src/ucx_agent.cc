#include "ucx_agent.h"

#include "agent_internal.h"

#include <sys/epoll.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <future>

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
  // Keep-alive runs inside ucp_worker_progress: with endpoints open, tick at least once a
  // second so a dead shared-memory peer is found even when nothing else wakes us.
  if (!peers_.empty()) next = std::min(next, Clock::now() + std::chrono::milliseconds(500));
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
    if (it->second.reads > 0) {
      status = Status::Error(ErrorKind::kInvalidArgument, "region has reads in flight");
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

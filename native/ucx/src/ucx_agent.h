// UcxAgent: one UCP context + one worker, driven by its own progress thread.
//
// Every UCX call happens on the progress thread (worker thread mode SINGLE): public methods
// post commands to it and wake it with ucp_worker_signal. Reads complete through a callback
// that runs on the progress thread; the N-API layer forwards it to JS through a
// ThreadSafeFunction. Nothing here knows about Node, so tests/ucx_agent_test.cc drives it
// directly.
//
// Memory: host memory only (this UCX has no CUDA transport). Device memory seam: see
// MemoryKind and README.md "Device memory".
#pragma once

#include <ucp/api/ucp.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

namespace tandem::ucx {

// Mirrors the codes of runtime/errors.ts that a transfer can end with.
enum class ErrorKind { kNone, kUnavailable, kInvalidArgument, kDeadlineExceeded, kInternal };

const char* ErrorCodeName(ErrorKind kind);

struct Status {
  ErrorKind kind = ErrorKind::kNone;
  std::string message;

  bool ok() const { return kind == ErrorKind::kNone; }
  static Status Ok() { return {}; }
  static Status Error(ErrorKind kind, std::string message) { return {kind, std::move(message)}; }
};

// One copy: `length` bytes from remote_base + remote_offset into local region + local_offset.
struct Range {
  uint64_t remote_offset;
  uint64_t local_offset;
  uint64_t length;
};

// Merges neighbours (in the given order) that are contiguous on both sides, so one get
// moves a run of consecutive blocks. Zero-length ranges are dropped.
std::vector<Range> CoalesceRanges(const std::vector<Range>& ranges);

// Where registered memory lives. Only kHost is implemented; the others are the seam for
// device KV pools (README.md "Device memory").
enum class MemoryKind { kHost, kCuda };

struct AgentOptions {
  // ucp_config_modify overrides (name without the UCX_ prefix, e.g. {"TLS", "tcp"}).
  // Environment variables (UCX_*) are read first, then these win.
  std::vector<std::pair<std::string, std::string>> config;
  // How long the progress thread keeps polling after the last event while reads are in
  // flight, before it sleeps on the event fd. Polling saves a wake-up per fragment.
  uint32_t busy_poll_us = 50;
  // Coalesced ranges longer than this are issued as several gets (0: never split).
  uint64_t max_get_bytes = 0;
};

struct Region {
  uint64_t id = 0;
  uint64_t base = 0;  // virtual address of the first byte
  uint64_t length = 0;
  std::string rkey;   // packed remote key, raw bytes
};

struct ReadRequest {
  std::string peer_address;  // raw worker address bytes of the peer
  uint64_t remote_base = 0;
  std::string rkey;          // raw packed rkey bytes
  uint64_t local_region = 0;
  std::vector<Range> ranges;
  uint32_t timeout_ms = 0;   // 0: no deadline
};

struct ReadResult {
  Status status;
  uint64_t bytes = 0;
  double seconds = 0;  // submit to last completion, measured on the progress thread
};

// Called exactly once, on the progress thread.
using ReadCallback = std::function<void(ReadResult)>;

struct AgentStats {
  uint32_t endpoints = 0;        // live endpoints in the per-peer cache
  uint32_t closing_endpoints = 0;
  uint32_t inflight_reads = 0;   // batches not yet completed
  uint32_t regions = 0;
  uint64_t bytes_read = 0;
  uint64_t reads_ok = 0;
  uint64_t reads_failed = 0;
  uint64_t peer_failures = 0;    // endpoints dropped by the error handler or a deadline
};

class UcxAgent {
 public:
  // Null on failure, with *error set.
  static std::unique_ptr<UcxAgent> Create(const AgentOptions& options, Status* error);
  ~UcxAgent();

  UcxAgent(const UcxAgent&) = delete;
  UcxAgent& operator=(const UcxAgent&) = delete;

  // Raw worker address bytes (hex-encode them for the model card).
  const std::string& address() const { return address_; }

  // Registers [ptr, ptr+length) and packs its remote key. The caller keeps the memory alive
  // until DeregisterMemory.
  Status RegisterMemory(void* ptr, uint64_t length, MemoryKind kind, Region* out);
  // Allocates `length` bytes of host memory through UCX (a shared-memory segment where the
  // shm transport can map it, so local peers read it with one copy) and registers it.
  // Region.base is the address; DeregisterMemory frees it.
  Status AllocateMemory(uint64_t length, Region* out);
  // Refused (invalid_argument) while reads into the region are in flight.
  Status DeregisterMemory(uint64_t region_id);

  // Queues a batched read; `done` runs once on the progress thread. Thread-safe.
  void Read(ReadRequest request, ReadCallback done);

  // Drops the cached endpoint to a peer (reads in flight to it fail). Thread-safe.
  void Disconnect(const std::string& peer_address);

  AgentStats Stats();

  // True when UCX can register device (CUDA) memory directly.
  bool cuda_supported() const { return cuda_supported_; }

  // Fails pending reads ("agent closed"), closes every endpoint, releases the worker and
  // context, joins the thread. Idempotent. Call it from the thread that issues reads (the
  // JS thread for the addon): a Read racing with Close may never be answered.
  void Close();

 private:
  struct Peer;
  struct Batch;
  struct RegionEntry {
    ucp_mem_h memh;
    uint64_t base;
    uint64_t length;
    uint32_t reads = 0;  // batches writing into it; deregistering waits for zero
  };
  using Clock = std::chrono::steady_clock;

  UcxAgent() = default;
  Status Init(const AgentOptions& options);

  // Runs `fn` on the progress thread and waits for it; false when the thread is gone.
  bool RunSync(std::function<void()> fn);
  void Teardown();
  Status MapMemory(void* ptr, uint64_t length, MemoryKind kind, Region* out);
  void Post(std::function<void()> fn);
  void ProgressLoop();
  bool DrainCommands();

  // Progress-thread only.
  void StartRead(ReadRequest& request, ReadCallback& done);
  Peer* GetPeer(const std::string& address, Status* error);
  ucp_rkey_h GetRkey(Peer* peer, const std::string& packed, Status* error);
  void MarkFailed(Peer* peer, ErrorKind kind, const std::string& why);
  void FailPeer(Peer* peer, ErrorKind kind, const std::string& why);
  void ClosePeer(Peer* peer, bool force);
  void FinishBatch(Batch* batch);
  void ReapClosing();
  void CheckDeadlines();
  int NextTimeoutMs() const;

  static void OnGetDone(void* request, ucs_status_t status, void* user_data);
  static void OnPeerError(void* arg, ucp_ep_h ep, ucs_status_t status);

  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  int event_fd_ = -1;
  int epoll_fd_ = -1;
  std::string address_;
  uint32_t busy_poll_us_ = 50;
  uint64_t max_get_bytes_ = 0;

  std::thread thread_;
  std::mutex mutex_;
  std::deque<std::function<void()>> commands_;
  std::atomic<bool> running_{false};
  bool exit_loop_ = false;  // progress thread only
  bool cuda_supported_ = false;
  bool closed_ = false;  // guarded by close_mutex_
  std::mutex close_mutex_;

  // Progress-thread state.
  std::unordered_map<std::string, Peer*> peers_;
  std::vector<std::pair<Peer*, void*>> closing_;  // peer + close request
  std::unordered_map<uint64_t, RegionEntry> regions_;
  std::unordered_map<uint64_t, Batch*> batches_;
  uint64_t next_region_id_ = 1;
  uint64_t next_batch_id_ = 1;

  std::mutex stats_mutex_;
  AgentStats stats_;
};

}  // namespace tandem::ucx

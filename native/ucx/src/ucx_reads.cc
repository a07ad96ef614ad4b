// The read half of UcxAgent: batches of gets, the per-peer endpoint and rkey caches, peer
// failure, deadlines and endpoint teardown. Everything here runs on the progress thread.
#include <algorithm>
#include <mutex>

#include "agent_internal.h"
#include "ucx_agent.h"

namespace tandem::ucx {

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
    batch->region = region->first;
    ++region->second.reads;
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
  if (batch->region != 0) {
    auto region = regions_.find(batch->region);
    if (region != regions_.end() && region->second.reads > 0) --region->second.reads;
  }
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

}  // namespace tandem::ucx

// N-API surface of tandem_ucx.node. It only converts arguments and queues work on UcxAgent;
// completions come back from the progress thread through one ThreadSafeFunction per agent.
//
// JS: new Agent({config?, busyPollUs?}) with address(), register(buf), allocate(n),
// deregister(id), read(peer, base, rkey, region, ranges, timeoutMs) -> Promise,
// disconnect(peer), stats(), close(). Types: workers/kv-transfer/addon.ts.
#include <napi.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <unordered_map>

#include "hex.h"
#include "ucx_agent.h"

namespace tandem::ucx {
namespace {

struct Completion {
  uint64_t id;
  ReadResult result;
};

class AgentWrap;
void CallJs(Napi::Env env, Napi::Function, AgentWrap* context, Completion* data);
using Tsfn = Napi::TypedThreadSafeFunction<AgentWrap, Completion, CallJs>;

Napi::Error MakeError(Napi::Env env, ErrorKind kind, const std::string& message) {
  Napi::Error error = Napi::Error::New(env, message);
  error.Set("code", Napi::String::New(env, ErrorCodeName(kind)));
  return error;
}

[[noreturn]] void ThrowInvalid(Napi::Env env, const std::string& message) {
  throw MakeError(env, ErrorKind::kInvalidArgument, message);
}

std::string BaseToHex(uint64_t base) {
  char text[32];
  std::snprintf(text, sizeof(text), "0x%llx", static_cast<unsigned long long>(base));
  return text;
}

uint64_t ParseAddress(Napi::Env env, const Napi::Value& value) {
  if (value.IsBigInt()) {
    bool lossless = false;
    const uint64_t v = value.As<Napi::BigInt>().Uint64Value(&lossless);
    if (!lossless) ThrowInvalid(env, "remote base address out of range");
    return v;
  }
  if (!value.IsString()) ThrowInvalid(env, "remote base address must be a string (0x...) or bigint");
  const std::string text = value.As<Napi::String>().Utf8Value();
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(text.c_str(), &end, 0);
  if (text.empty() || errno != 0 || end == nullptr || *end != '\0') {
    ThrowInvalid(env, "bad remote base address '" + text + "'");
  }
  return v;
}

std::string ParseHex(Napi::Env env, const Napi::Value& value, const char* what) {
  if (!value.IsString()) ThrowInvalid(env, std::string(what) + " must be a hex string");
  std::string raw;
  if (!FromHex(value.As<Napi::String>().Utf8Value(), &raw) || raw.empty()) {
    ThrowInvalid(env, std::string(what) + " is not valid hex");
  }
  return raw;
}

Napi::Object RegionToJs(Napi::Env env, const Region& region) {
  Napi::Object out = Napi::Object::New(env);
  out.Set("id", Napi::Number::New(env, static_cast<double>(region.id)));
  out.Set("base", Napi::String::New(env, BaseToHex(region.base)));
  out.Set("length", Napi::Number::New(env, static_cast<double>(region.length)));
  out.Set("rkey", Napi::String::New(env, ToHex(region.rkey.data(), region.rkey.size())));
  return out;
}

class AgentWrap : public Napi::ObjectWrap<AgentWrap> {
 public:
  static Napi::Function Define(Napi::Env env) {
    return DefineClass(env, "UcxAgent",
                       {
                           InstanceMethod<&AgentWrap::Address>("address"),
                           InstanceMethod<&AgentWrap::CudaSupported>("cudaSupported"),
                           InstanceMethod<&AgentWrap::Register>("register"),
                           InstanceMethod<&AgentWrap::Allocate>("allocate"),
                           InstanceMethod<&AgentWrap::Deregister>("deregister"),
                           InstanceMethod<&AgentWrap::Read>("read"),
                           InstanceMethod<&AgentWrap::Disconnect>("disconnect"),
                           InstanceMethod<&AgentWrap::Stats>("stats"),
                           InstanceMethod<&AgentWrap::Close>("close"),
                       });
  }

  explicit AgentWrap(const Napi::CallbackInfo& info) : Napi::ObjectWrap<AgentWrap>(info) {
    Napi::Env env = info.Env();
    AgentOptions options;
    if (info.Length() > 0 && info[0].IsObject()) {
      Napi::Object opts = info[0].As<Napi::Object>();
      if (opts.Has("config") && opts.Get("config").IsObject()) {
        Napi::Object config = opts.Get("config").As<Napi::Object>();
        Napi::Array keys = config.GetPropertyNames();
        for (uint32_t i = 0; i < keys.Length(); ++i) {
          const std::string key = keys.Get(i).ToString().Utf8Value();
          options.config.emplace_back(key, config.Get(key).ToString().Utf8Value());
        }
      }
      if (opts.Has("busyPollUs") && opts.Get("busyPollUs").IsNumber()) {
        options.busy_poll_us = opts.Get("busyPollUs").As<Napi::Number>().Uint32Value();
      }
      if (opts.Has("maxGetBytes") && opts.Get("maxGetBytes").IsNumber()) {
        options.max_get_bytes = static_cast<uint64_t>(opts.Get("maxGetBytes").As<Napi::Number>().Int64Value());
      }
    }
    Status status;
    agent_ = UcxAgent::Create(options, &status);
    if (!agent_) throw MakeError(env, status.kind, "UCX agent: " + status.message);
    tsfn_ = Tsfn::New(env, "tandem_ucx_completions", 0, 1, this);
    tsfn_.Unref(env);  // only pending reads keep the process alive
    tsfn_live_ = true;
    // A process that exits without close() still stops the progress thread before UCX's
    // own teardown runs.
    cleanup_ = env.AddCleanupHook(&AgentWrap::OnEnvCleanup, this);
  }

  ~AgentWrap() override {
    if (!cleanup_.IsEmpty()) cleanup_.Remove(Env());
    Shutdown(nullptr);
  }

  static void OnEnvCleanup(AgentWrap* self) {
    self->cleanup_ = {};
    self->Shutdown(nullptr);
  }

  void Deliver(Napi::Env env, Completion* completion) {
    auto it = pending_.find(completion->id);
    if (it == pending_.end()) return;
    Napi::Promise::Deferred deferred = it->second;
    pending_.erase(it);
    const ReadResult& r = completion->result;
    if (r.status.ok()) {
      Napi::Object value = Napi::Object::New(env);
      value.Set("bytes", Napi::Number::New(env, static_cast<double>(r.bytes)));
      value.Set("seconds", Napi::Number::New(env, r.seconds));
      deferred.Resolve(value);
    } else {
      deferred.Reject(MakeError(env, r.status.kind, r.status.message).Value());
    }
    ReleaseHold(env);
  }

 private:
  // Pending reads and UCX-allocated buffers pin this wrapper (no GC under the progress
  // thread's feet) and pending reads keep the event loop alive.
  void TakeHold(Napi::Env env, bool loop) {
    if (holds_++ == 0) Ref();
    if (loop && loop_holds_++ == 0 && tsfn_live_) tsfn_.Ref(env);
  }
  void ReleaseHold(Napi::Env env, bool loop = true) {
    if (loop && --loop_holds_ == 0 && tsfn_live_) tsfn_.Unref(env);
    if (--holds_ == 0) Unref();
  }

  UcxAgent& Live(Napi::Env env) {
    if (!agent_ || closed_) throw MakeError(env, ErrorKind::kUnavailable, "UCX agent is closed");
    return *agent_;
  }

  Napi::Value Address(const Napi::CallbackInfo& info) {
    const std::string& raw = Live(info.Env()).address();
    return Napi::String::New(info.Env(), ToHex(raw.data(), raw.size()));
  }

  Napi::Value CudaSupported(const Napi::CallbackInfo& info) {
    return Napi::Boolean::New(info.Env(), Live(info.Env()).cuda_supported());
  }

  Napi::Value Register(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    UcxAgent& agent = Live(env);
    void* data = nullptr;
    size_t length = 0;
    if (info.Length() > 0 && info[0].IsArrayBuffer()) {
      Napi::ArrayBuffer ab = info[0].As<Napi::ArrayBuffer>();
      data = ab.Data();
      length = ab.ByteLength();
    } else if (info.Length() > 0 && info[0].IsTypedArray()) {
      Napi::TypedArray ta = info[0].As<Napi::TypedArray>();
      data = static_cast<uint8_t*>(ta.ArrayBuffer().Data()) + ta.ByteOffset();
      length = ta.ByteLength();
    } else if (info.Length() > 0 && info[0].IsDataView()) {
      Napi::DataView dv = info[0].As<Napi::DataView>();
      data = static_cast<uint8_t*>(dv.ArrayBuffer().Data()) + dv.ByteOffset();
      length = dv.ByteLength();
    } else {
      ThrowInvalid(env, "register() takes an ArrayBuffer, Buffer or typed array");
    }
    Region region;
    Status status = agent.RegisterMemory(data, length, MemoryKind::kHost, &region);
    if (!status.ok()) throw MakeError(env, status.kind, status.message);
    // The reference keeps the buffer from being collected while UCX may touch it.
    held_.emplace(region.id, Held{Napi::Persistent(info[0].As<Napi::Object>()), false});
    return RegionToJs(env, region);
  }

  Napi::Value Allocate(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    UcxAgent& agent = Live(env);
    if (info.Length() < 1 || !info[0].IsNumber()) ThrowInvalid(env, "allocate() takes a byte count");
    const double bytes = info[0].As<Napi::Number>().DoubleValue();
    if (!(bytes > 0) || bytes != std::floor(bytes) || bytes > 9007199254740991.0) {
      ThrowInvalid(env, "allocate() takes a positive integer byte count");
    }
    Region region;
    Status status = agent.AllocateMemory(static_cast<uint64_t>(bytes), &region);
    if (!status.ok()) throw MakeError(env, status.kind, status.message);
    // UCX owns the memory; deregister()/close() detach this ArrayBuffer before freeing it, so
    // JS never sees a dangling pointer.
    Napi::ArrayBuffer buffer =
        Napi::ArrayBuffer::New(env, reinterpret_cast<void*>(region.base), static_cast<size_t>(region.length));
    held_.emplace(region.id, Held{Napi::Persistent(buffer.As<Napi::Object>()), true});
    TakeHold(env, false);
    Napi::Object out = RegionToJs(env, region);
    out.Set("buffer", buffer);
    return out;
  }

  void DropRegion(Napi::Env env, uint64_t id) {
    auto it = held_.find(id);
    if (it == held_.end()) return;
    if (it->second.allocated) {
      Napi::Value value = it->second.ref.Value();
      if (value.IsArrayBuffer()) {
        Napi::ArrayBuffer ab = value.As<Napi::ArrayBuffer>();
        if (!ab.IsDetached()) ab.Detach();
      }
      held_.erase(it);
      ReleaseHold(env, false);
    } else {
      held_.erase(it);
    }
  }

  Napi::Value Deregister(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    UcxAgent& agent = Live(env);
    if (info.Length() < 1 || !info[0].IsNumber()) ThrowInvalid(env, "deregister() takes a region id");
    const uint64_t id = static_cast<uint64_t>(info[0].As<Napi::Number>().Int64Value());
    if (held_.find(id) == held_.end()) ThrowInvalid(env, "unknown region id");
    Status status = agent.DeregisterMemory(id);
    if (!status.ok()) throw MakeError(env, status.kind, status.message);
    // Unmapped above; detaching now is still before any JS can touch the buffer again.
    DropRegion(env, id);
    return env.Undefined();
  }

  // read(peerHex, remoteBase, rkeyHex, localRegionId, ranges: Float64Array [remoteOff,
  // localOff, len]*, timeoutMs?) -> Promise<{bytes, seconds}>
  Napi::Value Read(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    UcxAgent& agent = Live(env);
    if (info.Length() < 5) ThrowInvalid(env, "read(peer, remoteBase, rkey, localRegion, ranges, timeoutMs?)");
    ReadRequest request;
    request.peer_address = ParseHex(env, info[0], "peer worker address");
    request.remote_base = ParseAddress(env, info[1]);
    request.rkey = ParseHex(env, info[2], "remote key");
    if (!info[3].IsNumber()) ThrowInvalid(env, "local region id must be a number");
    request.local_region = static_cast<uint64_t>(info[3].As<Napi::Number>().Int64Value());
    if (!info[4].IsTypedArray() || info[4].As<Napi::TypedArray>().TypedArrayType() != napi_float64_array) {
      ThrowInvalid(env, "ranges must be a Float64Array of [remoteOffset, localOffset, length] triples");
    }
    Napi::Float64Array ranges = info[4].As<Napi::Float64Array>();
    if (ranges.ElementLength() % 3 != 0) ThrowInvalid(env, "ranges length must be a multiple of 3");
    request.ranges.reserve(ranges.ElementLength() / 3);
    for (size_t i = 0; i < ranges.ElementLength(); i += 3) {
      const double a = ranges[i], b = ranges[i + 1], c = ranges[i + 2];
      if (!(a >= 0 && b >= 0 && c >= 0) || a != std::floor(a) || b != std::floor(b) || c != std::floor(c)) {
        ThrowInvalid(env, "ranges must hold non-negative integers");
      }
      request.ranges.push_back(Range{static_cast<uint64_t>(a), static_cast<uint64_t>(b), static_cast<uint64_t>(c)});
    }
    if (info.Length() > 5 && info[5].IsNumber()) {
      request.timeout_ms = info[5].As<Napi::Number>().Uint32Value();
    }
    const uint64_t id = next_id_++;
    Napi::Promise::Deferred deferred = Napi::Promise::Deferred::New(env);
    pending_.emplace(id, deferred);
    TakeHold(env, true);
    Tsfn tsfn = tsfn_;
    agent.Read(std::move(request), [tsfn, id](ReadResult result) mutable {
      tsfn.NonBlockingCall(new Completion{id, std::move(result)});
    });
    return deferred.Promise();
  }

  Napi::Value Disconnect(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    Live(env).Disconnect(ParseHex(env, info[0], "peer worker address"));
    return env.Undefined();
  }

  Napi::Value Stats(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    const AgentStats s = agent_ ? agent_->Stats() : AgentStats{};
    Napi::Object out = Napi::Object::New(env);
    out.Set("endpoints", s.endpoints);
    out.Set("closingEndpoints", s.closing_endpoints);
    out.Set("inflightReads", s.inflight_reads);
    out.Set("regions", s.regions);
    out.Set("bytesRead", static_cast<double>(s.bytes_read));
    out.Set("readsOk", static_cast<double>(s.reads_ok));
    out.Set("readsFailed", static_cast<double>(s.reads_failed));
    out.Set("peerFailures", static_cast<double>(s.peer_failures));
    return out;
  }

  Napi::Value Close(const Napi::CallbackInfo& info) {
    Shutdown(&info);
    return info.Env().Undefined();
  }

  // info is null when called from the destructor (no JS calls allowed there).
  void Shutdown(const Napi::CallbackInfo* info) {
    if (closed_) return;
    closed_ = true;
    if (info != nullptr) {
      // Detach UCX-owned buffers before Close() frees them.
      std::vector<uint64_t> ids;
      for (auto& [id, held] : held_) ids.push_back(id);
      for (uint64_t id : ids) DropRegion(info->Env(), id);
    }
    // Close() answers pending reads through the TSFN; Release() after it lets those queued
    // answers drain before the TSFN finalizes.
    if (agent_) agent_->Close();
    if (tsfn_live_) {
      tsfn_live_ = false;
      tsfn_.Release();
    }
  }

  struct Held {
    Napi::ObjectReference ref;
    bool allocated;
  };

  std::unique_ptr<UcxAgent> agent_;
  Napi::Env::CleanupHook<void (*)(AgentWrap*), AgentWrap> cleanup_;
  Tsfn tsfn_;
  bool tsfn_live_ = false;
  bool closed_ = false;
  uint32_t holds_ = 0;
  uint32_t loop_holds_ = 0;
  uint64_t next_id_ = 1;
  std::unordered_map<uint64_t, Napi::Promise::Deferred> pending_;
  std::unordered_map<uint64_t, Held> held_;
};

void CallJs(Napi::Env env, Napi::Function, AgentWrap* context, Completion* data) {
  if (env != nullptr && context != nullptr) context->Deliver(env, data);
  delete data;
}

Napi::Value Version(const Napi::CallbackInfo& info) {
  return Napi::String::New(info.Env(), ucp_get_version_string());
}

Napi::Object InitModule(Napi::Env env, Napi::Object exports) {
  exports.Set("Agent", AgentWrap::Define(env));
  exports.Set("ucxVersion", Napi::Function::New(env, Version));
  return exports;
}

}  // namespace
}  // namespace tandem::ucx

static Napi::Object InitTandemUcx(Napi::Env env, Napi::Object exports) {
  return tandem::ucx::InitModule(env, exports);
}

NODE_API_MODULE(tandem_ucx, InitTandemUcx)

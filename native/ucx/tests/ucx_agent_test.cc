// Drives UcxAgent without Node: two agents (two workers) in one process read each other's
// registered memory. Run with UCX_TLS=tcp or UCX_TLS=sm,self to pick the transport.
#include <cstdio>
#include <algorithm>
#include <cstring>
#include <thread>
#include <future>
#include <vector>

#include "../src/hex.h"
#include "../src/ucx_agent.h"

using namespace tandem::ucx;

static int failures = 0;
#define CHECK(cond)                                                      \
  do {                                                                   \
    if (!(cond)) {                                                       \
      std::fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      ++failures;                                                        \
    }                                                                    \
  } while (0)

static ReadResult ReadSync(UcxAgent& agent, ReadRequest request) {
  std::promise<ReadResult> promise;
  auto future = promise.get_future();
  agent.Read(std::move(request), [&](ReadResult r) { promise.set_value(std::move(r)); });
  return future.get();
}

static void TestCoalesce() {
  // Blocks 3,4,5 -> local 0,1,2 are one run; 9 -> 3 is contiguous locally but not remotely.
  const uint64_t b = 100;
  auto out = CoalesceRanges({{3 * b, 0, b}, {4 * b, b, b}, {5 * b, 2 * b, b}, {9 * b, 3 * b, b}, {0, 0, 0}});
  CHECK(out.size() == 2);
  CHECK(out[0].remote_offset == 300 && out[0].local_offset == 0 && out[0].length == 300);
  CHECK(out[1].remote_offset == 900 && out[1].local_offset == 300 && out[1].length == 100);
  CHECK(CoalesceRanges({}).empty());
}

static void TestHex() {
  const std::string raw("\x00\x01\xab\xff", 4);
  const std::string hex = ToHex(raw.data(), raw.size());
  CHECK(hex == "0001abff");
  std::string back;
  CHECK(FromHex(hex, &back) && back == raw);
  CHECK(!FromHex("abc", &back));
  CHECK(!FromHex("zz", &back));
}

static void TestReadAcrossAgents() {
  Status error;
  auto source = UcxAgent::Create({}, &error);
  CHECK(source != nullptr);
  auto reader = UcxAgent::Create({}, &error);
  CHECK(reader != nullptr);
  if (!source || !reader) return;
  CHECK(!source->address().empty());

  const uint64_t block = 64 * 1024, blocks = 16;
  std::vector<uint8_t> remote(block * blocks), local(block * blocks, 0);
  for (size_t i = 0; i < remote.size(); ++i) remote[i] = static_cast<uint8_t>((i * 131 + 7) & 0xff);
  Region remote_region, local_region;
  CHECK(source->RegisterMemory(remote.data(), remote.size(), MemoryKind::kHost, &remote_region).ok());
  CHECK(reader->RegisterMemory(local.data(), local.size(), MemoryKind::kHost, &local_region).ok());
  CHECK(!remote_region.rkey.empty());

  // Remote blocks 2,3,4 and 10 into local blocks 0,1,2 and 7.
  ReadRequest request;
  request.peer_address = source->address();
  request.remote_base = remote_region.base;
  request.rkey = remote_region.rkey;
  request.local_region = local_region.id;
  request.ranges = {{2 * block, 0, block}, {3 * block, block, block}, {4 * block, 2 * block, block},
                    {10 * block, 7 * block, block}};
  ReadResult result = ReadSync(*reader, request);
  CHECK(result.status.ok());
  CHECK(result.bytes == 4 * block);
  CHECK(std::memcmp(local.data(), remote.data() + 2 * block, 3 * block) == 0);
  CHECK(std::memcmp(local.data() + 7 * block, remote.data() + 10 * block, block) == 0);
  CHECK(local[3 * block] == 0);
  CHECK(reader->Stats().endpoints == 1);
  CHECK(reader->Stats().bytes_read == 4 * block);

  // The endpoint is cached: a second read reuses it.
  result = ReadSync(*reader, request);
  CHECK(result.status.ok());
  CHECK(reader->Stats().endpoints == 1);

  // A range past the local region is refused before anything moves.
  request.ranges = {{0, block * blocks - 8, 16}};
  result = ReadSync(*reader, request);
  CHECK(result.status.kind == ErrorKind::kInvalidArgument);

  request.ranges = {{0, 0, block}};
  request.local_region = 999;
  CHECK(ReadSync(*reader, request).status.kind == ErrorKind::kInvalidArgument);

  // UCX-allocated memory (the shared-memory fast path) reads the same way.
  Region allocated;
  CHECK(source->AllocateMemory(4 * block, &allocated).ok());
  auto* alloc_bytes = reinterpret_cast<uint8_t*>(allocated.base);
  for (uint64_t i = 0; i < 4 * block; ++i) alloc_bytes[i] = static_cast<uint8_t>(i % 251);
  std::fill(local.begin(), local.end(), 0);
  request.remote_base = allocated.base;
  request.rkey = allocated.rkey;
  request.local_region = local_region.id;
  request.ranges = {{block, 0, 2 * block}};
  result = ReadSync(*reader, request);
  CHECK(result.status.ok());
  CHECK(std::memcmp(local.data(), alloc_bytes + block, 2 * block) == 0);
  CHECK(source->DeregisterMemory(allocated.id).ok());

  reader->Disconnect(source->address());
  for (int i = 0; i < 200 && reader->Stats().endpoints + reader->Stats().closing_endpoints > 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  CHECK(reader->Stats().endpoints == 0);
  CHECK(reader->Stats().closing_endpoints == 0);

  CHECK(reader->DeregisterMemory(local_region.id).ok());
  CHECK(reader->DeregisterMemory(local_region.id).kind == ErrorKind::kInvalidArgument);
  reader->Close();
  reader->Close();  // idempotent
  result = ReadSync(*reader, request);
  CHECK(result.status.kind == ErrorKind::kUnavailable);
  source->Close();
}

int main() {
  TestCoalesce();
  TestHex();
  TestReadAcrossAgents();
  if (failures == 0) std::printf("ucx_agent_test: all checks passed\n");
  return failures == 0 ? 0 : 1;
}

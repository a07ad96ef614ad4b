// What the CUDA benchmarks (gpu_bench.cc, fp8_bench.cc) share: flags after the subcommand, and
// timing (wall clock around synchronized batches of launches, the median of 5 after a warm-up).
#pragma once

#include <algorithm>
#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "../../native/src/cuda/device.h"

/** The value after `flag` among argv[2..], or the fallback. */
inline std::string arg(int argc, char** argv, const std::string& flag, const std::string& fallback = "") {
  for (int i = 2; i + 1 < argc; ++i) {
    if (flag == argv[i]) return argv[i + 1];
  }
  return fallback;
}

inline bool has(int argc, char** argv, const std::string& flag) {
  for (int i = 2; i < argc; ++i) {
    if (flag == argv[i]) return true;
  }
  return false;
}

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

/** Seconds per call of fn: warm-up, then the median of 5 synchronized batches of `reps` calls. */
inline double time_per_call(tandem::gpu::Device& dev, int reps, const std::function<void(int)>& fn) {
  for (int i = 0; i < std::min(reps, 3); ++i) fn(i);
  dev.synchronize();
  std::vector<double> samples;
  for (int b = 0; b < 5; ++b) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < reps; ++i) fn(i);
    dev.synchronize();
    samples.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps);
  }
  return median(samples);
}

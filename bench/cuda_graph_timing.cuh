// Timing for the CUDA microbenchmarks (bench_cuda_attention, bench_cuda_linear): `calls` calls
// captured into one CUDA graph (as the decode graphs run kernels, programmatic dependent launch
// included), replayed once to warm up, then `reps` times between CUDA events.
#pragma once
#include <cuda_runtime_api.h>

#include <algorithm>
#include <vector>

#include "backend/cuda/common.h"

namespace hearth::cuda {

// Median milliseconds per call over `reps` replays of a graph of call(0) … call(calls - 1).
// call(0) runs once before the capture (plans and workspaces are made outside it).
template <typename Call>
double graph_ms_per_call(Ctx& ctx, int calls, int reps, Call call) {
  call(0);
  HEARTH_CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  HEARTH_CUDA_CHECK(cudaStreamBeginCapture(ctx.stream, cudaStreamCaptureModeThreadLocal));
  for (int c = 0; c < calls; ++c) call(c);
  HEARTH_CUDA_CHECK(cudaStreamEndCapture(ctx.stream, &graph));
  HEARTH_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  HEARTH_CUDA_CHECK(cudaGraphLaunch(exec, ctx.stream));  // warm-up
  cudaEvent_t e0, e1;
  HEARTH_CUDA_CHECK(cudaEventCreate(&e0));
  HEARTH_CUDA_CHECK(cudaEventCreate(&e1));
  std::vector<double> ms;
  for (int r = 0; r < reps; ++r) {
    HEARTH_CUDA_CHECK(cudaEventRecord(e0, ctx.stream));
    HEARTH_CUDA_CHECK(cudaGraphLaunch(exec, ctx.stream));
    HEARTH_CUDA_CHECK(cudaEventRecord(e1, ctx.stream));
    HEARTH_CUDA_CHECK(cudaEventSynchronize(e1));
    float t = 0.0f;
    HEARTH_CUDA_CHECK(cudaEventElapsedTime(&t, e0, e1));
    ms.push_back(double(t) / calls);
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

}  // namespace hearth::cuda

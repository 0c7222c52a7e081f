// The CUDA backend: decode steps recorded and replayed as CUDA graphs, and the pinned "dyn" area
// that carries a step's host inputs to the device (see cuda_backend_impl.h).
#include <cstring>

#include "backend/cuda/cuda_backend_impl.h"
#include "core/error.h"

namespace hearth::cuda {

void CudaBackend::begin_step(int64_t n_tokens) {
  // Decode-sized steps (1 to kGraphTokens rows: one token, or a few being verified) are
  // recorded; each size keeps its own graph.
  open_step(graphs_enabled_ && n_tokens >= 1 && n_tokens <= kGraphTokens, n_tokens);
}

void CudaBackend::open_step(bool recordable, int64_t slot) {
  bind();
  ctx_.gemv_max_rows = gemv_rows(8);
  recs_.clear();
  blob_.clear();
  dedup_.clear();
  graph_cursor_ = 0;
  recording_ = recordable;
  slot_ = recording_ ? slot : 0;
  picked_input_ = false;
  // The copy of this area kDynAreas recorded steps ago may not have run yet (it waits for the
  // steps queued before it); with one step picked ahead it has.
  if (recording_) HEARTH_CUDA_CHECK(cudaEventSynchronize(dyn_copied_[size_t(dyn_area_)]));
}

void CudaBackend::end_step() {
  bind();
  // The capture launches the records, which read the step's GEMV row limit from ctx_.
  if (recording_) finish_recording();
  if (out_.p) deliver_now();
  recording_ = false;
  ctx_.gemv_max_rows = gemv_rows(8);  // ops outside a step, as in a step of one sequence
}

const int32_t* CudaBackend::upload_ints(const void* src, int64_t n, int tag) {
  if (n <= 0) return dyn_dev_;
  const size_t bytes = size_t(n) * 4;
  for (const auto& e : dedup_)
    if (e.tag == tag && e.n == n && std::memcmp(dyn_host_at(e.offset), src, bytes) == 0)
      return dyn_dev_ + e.offset;
  const int64_t len = (n + 3) / 4 * 4;  // 16-byte aligned slots
  int64_t at;
  if (recording_ && graph_cursor_ + len <= kGraphDynInts) {
    at = graph_cursor_;
    graph_cursor_ += len;
    std::memcpy(graph_dyn_host() + at, src, bytes);
  } else {
    if (recording_) stop_recording();  // a step with more inputs than the graph area holds
    if (len > kDynInts - kGraphDynInts)
      fail("CUDA backend: {} host values exceed the staging area", n);
    if (ring_ + len > kDynInts) {
      // Wrap: earlier copies out of the ring must have run before it is rewritten.
      HEARTH_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream));
      ring_ = kGraphDynInts;
      dedup_.clear();
    }
    at = ring_;
    ring_ += len;
    std::memcpy(dyn_host_ + at, src, bytes);
    HEARTH_CUDA_CHECK(
        cudaMemcpyAsync(dyn_dev_ + at, dyn_host_ + at, bytes, cudaMemcpyHostToDevice, ctx_.stream));
  }
  if (dedup_.size() >= 8) dedup_.erase(dedup_.begin());
  dedup_.push_back({tag, n, at});
  return dyn_dev_ + at;
}

void CudaBackend::stop_recording() {
  if (!recording_) return;
  recording_ = false;
  dedup_.clear();  // graph-area slots are not ring slots
  // Values uploaded for an op not recorded yet (it stopped the recording) are copied too.
  copy_graph_dyn();
  for (const Record& r : recs_) r.fn(ctx_, blob_.data() + r.offset);
  recs_.clear();
  blob_.clear();
}

void CudaBackend::copy_graph_dyn() {
  if (graph_cursor_ > 0)
    HEARTH_CUDA_CHECK(cudaMemcpyAsync(dyn_dev_, graph_dyn_host(), size_t(graph_cursor_) * 4,
                                      cudaMemcpyHostToDevice, ctx_.stream));
  // The area is rewritten kDynAreas recorded steps later, after this event (begin_step).
  HEARTH_CUDA_CHECK(cudaEventRecord(dyn_copied_[size_t(dyn_area_)], ctx_.stream));
  dyn_area_ = (dyn_area_ + 1) % kDynAreas;
}

void CudaBackend::invalidate_graph() {
  for (auto& [slot, g] : graphs_) {
    g.recs.clear();
    g.blob.clear();
  }
}

bool CudaBackend::records_match() const {
  const auto it = graphs_.find(slot_);
  if (it == graphs_.end()) return false;
  const GraphSlot& g = it->second;
  if (!g.exec || g.recs.size() != recs_.size() || g.cursor != graph_cursor_ ||
      g.blob.size() != blob_.size())
    return false;
  for (size_t i = 0; i < recs_.size(); ++i)
    if (recs_[i].fn != g.recs[i].fn || recs_[i].size != g.recs[i].size) return false;
  return std::memcmp(blob_.data(), g.blob.data(), blob_.size()) == 0;
}

void CudaBackend::finish_recording() {
  recording_ = false;
  if (out_.p) submit_recorded_d2h();
  if (!recs_.empty()) {
    if (!records_match()) {
      // A step picked ahead may still run this slot's graph; updating or replacing an
      // executable graph is simplest with none in flight, and captures are rare.
      HEARTH_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream));
      capture();
    }
    copy_graph_dyn();
    GraphSlot& g = graphs_[slot_];
    g.last_used = ++steps_recorded_;
    HEARTH_CUDA_CHECK(cudaGraphLaunch(g.exec, ctx_.stream));
    ++graphs_replayed_;
  }
  recs_.clear();
  blob_.clear();
  dedup_.clear();
  if (out_.p) finish_delivery();
}

void CudaBackend::submit_recorded_d2h() {
  Record r{&invoke<&launch_d2h, void*, const void*, size_t>, blob_.size(), 0};
  put(blob_, static_cast<void*>(out_host_));
  put(blob_, static_cast<const void*>(out_.p));
  put(blob_, out_bytes_);
  r.size = blob_.size() - r.offset;
  recs_.push_back(r);
  out_queued_ = true;
}

void CudaBackend::capture() {
  HEARTH_CUDA_CHECK(cudaStreamBeginCapture(ctx_.stream, cudaStreamCaptureModeThreadLocal));
  cudaGraph_t graph = nullptr;
  try {
    for (const Record& r : recs_) r.fn(ctx_, blob_.data() + r.offset);
  } catch (...) {
    cudaStreamEndCapture(ctx_.stream, &graph);
    if (graph) cudaGraphDestroy(graph);
    throw;
  }
  HEARTH_CUDA_CHECK(cudaStreamEndCapture(ctx_.stream, &graph));
  if (is_batch_slot(slot_) && !graphs_.count(slot_)) evict_batch_graphs();
  GraphSlot& slot = graphs_[slot_];
  bool updated = false;
  if (slot.exec) {
    cudaGraphExecUpdateResultInfo info{};
    updated = cudaGraphExecUpdate(slot.exec, graph, &info) == cudaSuccess;
    if (!updated) {
      cudaGetLastError();
      cudaGraphExecDestroy(slot.exec);
      slot.exec = nullptr;
    }
  }
  if (!updated) {
    const cudaError_t err = cudaGraphInstantiate(&slot.exec, graph, 0);
    cudaGraphDestroy(graph);
    HEARTH_CUDA_CHECK(err);
  } else {
    cudaGraphDestroy(graph);
  }
  slot.recs = recs_;
  slot.blob = blob_;
  slot.cursor = graph_cursor_;
  ++graphs_captured_;
}

void CudaBackend::evict_batch_graphs() {
  size_t kept = 0;
  for (const auto& [slot, g] : graphs_) kept += is_batch_slot(slot);
  while (kept >= kBatchGraphs) {
    auto oldest = graphs_.end();
    for (auto it = graphs_.begin(); it != graphs_.end(); ++it)
      if (is_batch_slot(it->first) &&
          (oldest == graphs_.end() || it->second.last_used < oldest->second.last_used))
        oldest = it;
    if (oldest->second.exec) cudaGraphExecDestroy(oldest->second.exec);
    graphs_.erase(oldest);
    --kept;
  }
}

}  // namespace hearth::cuda

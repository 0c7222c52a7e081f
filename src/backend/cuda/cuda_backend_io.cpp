// The CUDA backend: device memory, weight upload, and what leaves the device (host outputs such as
// the logits, and token picks).
#include <algorithm>
#include <cstddef>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "backend/cuda/cuda_backend_impl.h"
#include "core/error.h"
#include "core/thread_pool.h"

namespace hearth::cuda {

// Device memory of a DeviceBuffer goes back to its backend's free blocks, not to cudaFree: a
// request's KV caches come and go with it, and cudaFree waits for the whole device (a stall in
// every running request's steps). A block is reused by its own backend only, whose work is all
// on one stream, so a kernel queued before the block changed hands is ordered before any use by
// its next owner. Blocks whose backend is gone are freed at once.
//
// The driver hands out large allocations in 2 MiB pages, so a block of an odd size (a KV cache
// block of 64 positions: 9 MiB on the 8B) would waste the rest of its last page, a ninth of all
// KV memory there. Such blocks come from slabs of about 64 MiB cut into slots of the one size;
// a slot is a block like any other, and a slab goes back to the driver once none of its slots
// is in use.
namespace {
constexpr size_t kPage = size_t(2) << 20;
constexpr size_t kSlabBytes = size_t(64) << 20;
struct Slab {
  void* base;
  int live;            // slots in use
  CudaBackend* owner;  // null once its backend is gone
  std::vector<void*> slots;
};
struct LiveBlock {
  CudaBackend* owner;
  size_t bytes;
};
std::mutex g_blocks_mu;
std::unordered_map<void*, LiveBlock>& live_blocks() {
  static auto* blocks = new std::unordered_map<void*, LiveBlock>();  // outlives every backend
  return *blocks;
}
std::unordered_map<void*, Slab*>& slab_of() {  // every slot of every slab
  static auto* slabs = new std::unordered_map<void*, Slab*>();
  return *slabs;
}
Slab* find_slab(void* p) {
  auto it = slab_of().find(p);
  return it == slab_of().end() ? nullptr : it->second;
}
void free_slab(Slab* s) {
  for (void* slot : s->slots) slab_of().erase(slot);
  cudaFree(s->base);
  delete s;
}
// Whether blocks of `bytes` come from slabs: past a page, and not a whole number of pages.
bool slabbed(size_t bytes) { return bytes > kPage && bytes < kSlabBytes / 2 && bytes % kPage; }
}  // namespace

void CudaBackend::give_back_block(void* p) {
  std::lock_guard lock(g_blocks_mu);
  auto it = live_blocks().find(p);
  Slab* slab = find_slab(p);
  if (slab) --slab->live;
  if (it == live_blocks().end() || !it->second.owner) {
    if (it != live_blocks().end()) live_blocks().erase(it);
    if (!slab) {
      cudaFree(p);
    } else if (slab->live == 0 && !slab->owner) {
      free_slab(slab);
    }
    return;
  }
  CudaBackend& owner = *it->second.owner;
  owner.free_blocks_.emplace(it->second.bytes, p);
  owner.free_block_bytes_ += it->second.bytes;
  live_blocks().erase(it);
}

void CudaBackend::release_free_blocks() {
  std::lock_guard lock(g_blocks_mu);
  // Whole blocks, and slabs none of whose slots is in use; slots of the others stay free here.
  std::vector<Slab*> empty;
  for (auto it = free_blocks_.begin(); it != free_blocks_.end();) {
    Slab* slab = find_slab(it->second);
    if (slab && slab->live > 0) {
      ++it;
      continue;
    }
    if (!slab) {
      cudaFree(it->second);
    } else if (std::find(empty.begin(), empty.end(), slab) == empty.end()) {
      empty.push_back(slab);
    }
    free_block_bytes_ -= it->first;
    it = free_blocks_.erase(it);
  }
  for (Slab* s : empty) free_slab(s);
}

void CudaBackend::disown_blocks() {
  release_free_blocks();
  std::lock_guard lock(g_blocks_mu);
  for (auto& [p, block] : live_blocks())
    if (block.owner == this) block.owner = nullptr;
  // The slabs still in use are freed by their last slot's buffer; their free slots go unused.
  for (auto& [slot, slab] : slab_of())
    if (slab->owner == this) slab->owner = nullptr;
  free_blocks_.clear();
  free_block_bytes_ = 0;
}

void* CudaBackend::device_malloc(size_t bytes) {
  void* p = nullptr;
  cudaError_t err = cudaMalloc(&p, bytes);
  if (err != cudaSuccess && free_block_bytes_ > 0) {  // the free blocks back to the driver first
    cudaGetLastError();
    release_free_blocks();
    err = cudaMalloc(&p, bytes);
  }
  if (err != cudaSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  return p;
}

DeviceBuffer CudaBackend::alloc(size_t bytes) {
  bind();
  stop_recording();
  // Blocks are whole 512-byte units; a free block up to an eighth larger than asked is taken.
  const size_t want = (std::max<size_t>(bytes, 256) + 511) / 512 * 512;
  {
    std::lock_guard lock(g_blocks_mu);
    auto it = free_blocks_.lower_bound(want);
    if (it != free_blocks_.end() && it->first <= want + want / 8) {
      void* p = it->second;
      live_blocks()[p] = LiveBlock{this, it->first};
      if (Slab* slab = find_slab(p)) ++slab->live;
      free_block_bytes_ -= it->first;
      free_blocks_.erase(it);
      return DeviceBuffer(p, bytes, Device::CUDA, give_back_block);
    }
  }
  if (slabbed(want)) {
    const size_t n = (kSlabBytes + want - 1) / want;
    if (void* base = device_malloc(n * want)) {
      auto* slab = new Slab{base, 1, this, {}};
      std::lock_guard lock(g_blocks_mu);
      for (size_t i = 0; i < n; ++i) {
        void* slot = static_cast<char*>(base) + i * want;
        slab->slots.push_back(slot);
        slab_of()[slot] = slab;
        if (i == 0) continue;
        free_blocks_.emplace(want, slot);
        free_block_bytes_ += want;
      }
      live_blocks()[base] = LiveBlock{this, want};
      return DeviceBuffer(base, bytes, Device::CUDA, give_back_block);
    }
  }
  void* p = device_malloc(want);  // a slab's room may be gone where one block's is not
  if (!p) {
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    throw OutOfMemory(fmt::format(
        "CUDA out of memory on cuda:{} allocating {:.1f} MiB ({:.1f} of {:.1f} GiB free)", device_,
        double(bytes) / (1 << 20), double(free_b) / (1 << 30), double(total_b) / (1 << 30)));
  }
  std::lock_guard lock(g_blocks_mu);
  live_blocks()[p] = LiveBlock{this, want};
  return DeviceBuffer(p, bytes, Device::CUDA, give_back_block);
}

size_t CudaBackend::memory_available() const {
  bind();
  size_t free_b = 0, total_b = 0;
  if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  std::lock_guard lock(g_blocks_mu);
  return free_b + free_block_bytes_;  // free blocks are this backend's to reuse
}

Tensor CudaBackend::prepare_weight(const Tensor& host) {
  if (host.is_packed()) return prepare_packed(host);
  bind();
  if (host.device == Device::CUDA) return host;
  const bool to_bf16 = host.dtype == DType::F16 && host.ndim == 2;
  const DType dtype = to_bf16 ? DType::BF16 : host.dtype;
  DeviceBuffer buf = alloc(host.nbytes());
  upload(buf.data(), host.data, host.nbytes());
  if (to_bf16) {
    // Same size (2 bytes per element): convert in place through a temporary.
    DeviceBuffer tmp = alloc(host.nbytes());
    HEARTH_CUDA_CHECK(cudaMemcpyAsync(tmp.data(), buf.data(), host.nbytes(),
                                      cudaMemcpyDeviceToDevice, ctx_.stream));
    Ten src(host), dst(host);
    src.p = tmp.data();
    dst.p = buf.data();
    dst.dtype = kBF16;
    cuda::convert(ctx_, dst, src);
    HEARTH_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream));
  }
  Tensor t = host;
  t.data = buf.data();
  t.dtype = dtype;
  t.device = Device::CUDA;
  weights_.push_back(std::move(buf));
  return t;
}

void CudaBackend::prepare_weights_stacked(const Tensor* host, int n, Tensor* out) {
  // One allocation for plain bf16 host matrices of the same columns whose rows stay 16-byte
  // aligned (the GEMV's vector loads read every part where it starts).
  bool stack = n >= 2;
  size_t bytes = 0;
  for (int i = 0; stack && i < n; ++i) {
    const Tensor& t = host[i];
    stack = !t.empty() && !t.is_packed() && t.device == Device::CPU && t.dtype == DType::BF16 &&
            t.ndim == 2 && t.dim(1) == host[0].dim(1) && t.dim(1) % 8 == 0;
    bytes += stack ? t.nbytes() : 0;
  }
  if (!stack) return Backend::prepare_weights_stacked(host, n, out);
  bind();
  DeviceBuffer buf = alloc(bytes);
  auto* at = static_cast<std::byte*>(buf.data());
  for (int i = 0; i < n; ++i) {
    upload(at, host[i].data, host[i].nbytes());
    out[i] = host[i];
    out[i].data = at;
    out[i].device = Device::CUDA;
    at += host[i].nbytes();
  }
  weights_.push_back(std::move(buf));
}

void CudaBackend::copy_from_host(const Tensor& dst, const void* src) {
  bind();
  stop_recording();
  HEARTH_CUDA_CHECK(
      cudaMemcpyAsync(dst.data, src, dst.nbytes(), cudaMemcpyHostToDevice, ctx_.stream));
}

void CudaBackend::to_host_f32(float* dst, const Tensor& src) {
  bind();
  const size_t bytes = size_t(src.numel()) * 4;
  Ten s(src);
  if (src.dtype != DType::F32) {
    if (bytes > tmp_bytes_) regrow_device(&tmp_dev_, tmp_bytes_, bytes);
    Ten f = s;
    f.p = tmp_dev_;
    f.dtype = kF32;
    submit<&cuda::convert>(f, s);
    s = f;
  }
  if (out_.p) deliver_or_queue_output();  // one pending host output at a time
  output_to_host(dst, s, bytes);
}

void CudaBackend::output_to_host(void* dst, const Ten& src, size_t bytes) {
  ensure_out_host(bytes);
  out_ = src;
  out_user_ = dst;
  out_bytes_ = bytes;
  if (recording_) {
    finish_recording();
  } else {
    deliver_now();
  }
}

void CudaBackend::pick_token(int32_t* dst, const Tensor& logits, const TokenPick& pick) {
  bind();
  // Greedy and sampled picks on the device (multi-block, sampling.cu): a sampled 8B decode
  // step is 12 % faster than bringing the row to the host (docs/PERFORMANCE.md). Logits that
  // are not a device f32 row go to the host picker. Either way token_dev_ no longer holds the
  // last pick ahead.
  last_pick_on_device_ = false;
  last_pick_host_ = -1;
  if (logits.device != Device::CUDA || logits.dtype != DType::F32)
    return Backend::pick_token(dst, logits, pick);
  submit_pick(logits, pick);
  // The token leaves as the step's host output (4 bytes instead of the logits row).
  if (out_.p) deliver_or_queue_output();
  Ten t;
  t.p = token_dev_;
  t.dtype = kF32;  // 4 opaque bytes
  t.ndim = 1;
  t.d[0] = 1;
  output_to_host(dst, t, 4);
}

void CudaBackend::submit_pick(const Tensor& logits, const TokenPick& pick) {
  const bool greedy = pick.temperature <= 0.0f;
  const PickDyn dyn{pick.temperature, pick.top_k, pick.top_p, pick.min_p, pick.u};
  static_assert(sizeof dyn % 4 == 0);
  const auto* d_dyn =
      reinterpret_cast<const PickDyn*>(upload_ints(&dyn, int64_t(sizeof dyn / 4), 6));
  if (!token_dev_) {
    stop_recording();
    HEARTH_CUDA_CHECK(cudaMalloc(&token_dev_, 16));
    invalidate_graph();
  }
  submit<&cuda::pick_token>(static_cast<int32_t*>(token_dev_), Ten(logits), d_dyn, greedy);
  // Greedy steps launch only the picker's first kernel, so they keep a graph of their own
  // (sampled ones the next set of slots) and alternating requests do not recapture.
  if (recording_) slot_ += pick_slot_offset(greedy);
}

void CudaBackend::pick_token_ahead(const Tensor& logits, const TokenPick& pick) {
  bind();
  if (ahead_.size() >= size_t(kAheadSlots))
    fail("CUDA backend: at most {} tokens can be picked ahead without being taken", kAheadSlots);
  if (logits.device != Device::CUDA || logits.dtype != DType::F32) {
    int32_t token = 0;
    pick_token(&token, logits, pick);  // on the host, now
    ahead_.push_back({-1, token});
    last_pick_host_ = token;
    return;
  }
  submit_pick(logits, pick);
  if (out_.p) deliver_or_queue_output();
  if (recording_) finish_recording();
  // The token to a pinned slot of its own, in stream order after the step: the next step's pick
  // rewrites token_dev_ only after this copy. Slots are reused in turn, so with fewer than
  // kAheadSlots picks untaken a slot's earlier token has been taken.
  const int slot = ahead_next_;
  ahead_next_ = (ahead_next_ + 1) % kAheadSlots;
  launch_d2h(ctx_, ahead_host_ + slot, token_dev_, 4);
  HEARTH_CUDA_CHECK(cudaEventRecord(ahead_ready_[size_t(slot)], ctx_.stream));
  ahead_.push_back({slot, 0});
  last_pick_on_device_ = true;
  last_pick_host_ = -1;
}

int32_t CudaBackend::take_picked_token() {
  if (ahead_.empty()) fail("take_picked_token: no token was picked ahead");
  const AheadPick p = ahead_.front();
  ahead_.pop_front();
  if (p.slot < 0) return p.token;
  bind();
  HEARTH_CUDA_CHECK(cudaEventSynchronize(ahead_ready_[size_t(p.slot)]));
  return ahead_host_[p.slot];
}

void CudaBackend::embedding_of_pick(const Tensor& y, const Tensor& table, float scale) {
  bind();
  if (!last_pick_on_device_) {
    if (last_pick_host_ < 0) fail("embedding_of_pick: no token was picked ahead");
    return embedding(y, table, &last_pick_host_, scale);
  }
  if (recording_) picked_input_ = true;
  const auto* ids = static_cast<const int32_t*>(token_dev_);
  if (table.is_packed())
    return submit<&cuda::packed_embedding>(Ten(y), PackedTen(table), ids, scale);
  submit<&cuda::embedding>(Ten(y), Ten(table), ids, scale);
}

void CudaBackend::linear_to_host(const Tensor& y, const Tensor& x, const Tensor& w,
                                 const Tensor& bias) {
  // The model's host logits buffer holds f32 whatever the activation dtype says.
  const size_t bytes = size_t(y.numel()) * 4;
  if (out_.p) deliver_or_queue_output();
  if (bytes > out_dev_bytes_) regrow_device(&out_dev_, out_dev_bytes_, bytes);
  ensure_out_host(bytes);
  Ten d(y);
  d.p = out_dev_;
  d.dtype = kF32;
  submit_linear(d, x, w, bias);
  out_ = d;
  out_user_ = y.data;
  out_bytes_ = bytes;
  if (!recording_) deliver_now();  // outside a step: complete on return
}

const Ten* CudaBackend::pending_host_output(const Tensor& x) const {
  return out_.p && out_user_ == x.data && size_t(x.numel()) * 4 == out_bytes_ ? &out_ : nullptr;
}

void CudaBackend::deliver_or_queue_output() {
  if (recording_) stop_recording();
  deliver_now();
}

void CudaBackend::deliver_now() {
  if (!out_.p) return;
  if (!out_queued_) launch_d2h(ctx_, out_host_, out_.p, out_bytes_);
  out_queued_ = true;
  finish_delivery();
}

void CudaBackend::finish_delivery() {
  HEARTH_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream));
  std::memcpy(out_user_, out_host_, out_bytes_);
  out_ = Ten();
  out_user_ = nullptr;
  out_queued_ = false;
}

void CudaBackend::ensure_out_host(size_t bytes) {
  if (bytes <= out_host_bytes_) return;
  stop_recording();
  HEARTH_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream));
  cudaFreeHost(out_host_);
  out_host_ = nullptr;
  HEARTH_CUDA_CHECK(cudaHostAlloc(&out_host_, bytes, cudaHostAllocDefault));
  out_host_bytes_ = bytes;
  invalidate_graph();
}

void CudaBackend::regrow_device(void** p, size_t& have, size_t need) {
  stop_recording();
  HEARTH_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream));
  cudaFree(*p);
  *p = nullptr;
  size_t bytes = have;
  have = 0;  // none until the new buffer exists (grow_device may throw)
  grow_device(p, bytes, need);
  have = bytes;
  invalidate_graph();  // captured graphs hold the old address
}

void CudaBackend::grow_device(void** p, size_t& have, size_t need) {
  const size_t bytes = std::max(need, have * 2);
  const cudaError_t err = cudaMalloc(p, bytes);
  if (err != cudaSuccess) {
    cudaGetLastError();
    fail("CUDA out of memory on cuda:{} allocating {:.1f} MiB of scratch", device_,
         double(bytes) / (1 << 20));
  }
  have = bytes;
}

void CudaBackend::upload(void* dst, const void* src, size_t bytes) {
  if (bytes < (4u << 20)) {
    HEARTH_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
    return;
  }
  if (staging_.empty()) {
    for (int i = 0; i < 2; ++i) {
      void* p = nullptr;
      HEARTH_CUDA_CHECK(cudaHostAlloc(&p, kUploadChunk, cudaHostAllocDefault));
      staging_.push_back(p);
      cudaEvent_t e;
      HEARTH_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
      staging_done_.push_back(e);
    }
  }
  ThreadPool& pool = ThreadPool::global();
  for (size_t off = 0, i = 0; off < bytes; off += kUploadChunk, ++i) {
    const size_t n = std::min(kUploadChunk, bytes - off);
    char* stage = static_cast<char*>(staging_[i % 2]);
    HEARTH_CUDA_CHECK(cudaEventSynchronize(staging_done_[i % 2]));
    const char* from = static_cast<const char*>(src) + off;
    const int64_t pieces = int64_t((n + (1u << 20) - 1) >> 20);
    pool.parallel_for(pieces, 1, [&](int64_t b, int64_t e) {
      const size_t lo = size_t(b) << 20, hi = std::min(n, size_t(e) << 20);
      std::memcpy(stage + lo, from + lo, hi - lo);
    });
    HEARTH_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(dst) + off, stage, n,
                                      cudaMemcpyHostToDevice, ctx_.stream));
    HEARTH_CUDA_CHECK(cudaEventRecord(staging_done_[i % 2], ctx_.stream));
  }
  HEARTH_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream));
}

}  // namespace hearth::cuda

// AMX-BF16 matmul for BF16 weights and many rows of x (prefill). Exactness trick: weights are
// bf16 already; x is split into hi = bf16(x) and lo = bf16(x - hi), and y accumulates W·hi +
// W·lo in f32 tiles, so each product carries ~2^-17 relative error instead of bf16's 2^-9.
// Operands: A = packed x (16 tokens x 32 k per tile, hi and lo tiles side by side, built once
// per call and shared by all threads); B = weights transposed into AMX's pair ("VNNI") layout,
// 16 outputs x 32 k per tile, packed per thread into an L2-resident panel; C = y tiles,
// 16 tokens x 16 outputs, written straight into y (via a small buffer only at ragged edges).
// Blocking: per thread, out chunks of kOc columns x k blocks of kKc; C = 2x2 tiles, so each B
// tile load feeds 4 dot products (hi and lo for two token blocks).
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "backend/cpu/matmul_kernels.h"
#include "core/buffer.h"

// Every function below is compiled for these features (the dispatcher checks them first);
// the headers above stay baseline.
#if defined(__clang__)
#pragma clang attribute push(                                                                   \
    __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,amx-tile,amx-bf16"))), \
    apply_to = function)
#else
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,amx-tile,amx-bf16")
#endif

namespace hearth::cpu::detail {
namespace {

// k per B panel pass and outputs per panel (multiples of 32; build-time overridable for
// tuning): the panel (kOc x kKc bf16, 128 KiB) stays in L2, a 32-token A block (32 KiB) in L1.
#ifndef HEARTH_AMX_KC
#define HEARTH_AMX_KC 256
#endif
#ifndef HEARTH_AMX_OC
#define HEARTH_AMX_OC 256
#endif
constexpr int64_t kKc = HEARTH_AMX_KC;
constexpr int64_t kOc = HEARTH_AMX_OC;
constexpr int64_t kTileElems = 16 * 32;  // bf16 per 1 KiB tile

inline int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// All eight tiles are 16 rows x 64 bytes: C00 C01 C10 C11 A0 A1 B0 B1.
void configure_tiles() {
  TileConfig cfg;
  for (int t = 0; t < 8; ++t) {
    cfg.colsb[t] = 64;
    cfg.rows[t] = 16;
  }
  _tile_loadconfig(&cfg);
}

// Transposes 16 rows of 16 dwords (pairs of bf16) so row p holds pair p of every input row.
inline void transpose16(__m512i r[16]) {
  __m512i t[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {
    r[4 * i + 0] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
    r[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
    r[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
    r[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
  }
  for (int j = 0; j < 4; ++j) {
    t[j] = _mm512_shuffle_i32x4(r[j], r[4 + j], 0x88);
    t[4 + j] = _mm512_shuffle_i32x4(r[j], r[4 + j], 0xdd);
    t[8 + j] = _mm512_shuffle_i32x4(r[8 + j], r[12 + j], 0x88);
    t[12 + j] = _mm512_shuffle_i32x4(r[8 + j], r[12 + j], 0xdd);
  }
  for (int j = 0; j < 8; ++j) {
    r[j] = _mm512_shuffle_i32x4(t[j], t[8 + j], 0x88);
    r[8 + j] = _mm512_shuffle_i32x4(t[j], t[8 + j], 0xdd);
  }
}

// B panel for outputs [o, o + 16 * n_tiles) x k [k0, k0 + 32 * n_steps): tile (t, s) at
// panel + (t * n_steps + s) * kTileElems. Rows past `out` and k past `k` are zero.
void pack_b(uint16_t* panel, const MatmulArgs& a, int64_t o, int n_tiles, int64_t k0, int n_steps) {
  const uint16_t* w = static_cast<const uint16_t*>(a.w);
  for (int t = 0; t < n_tiles; ++t) {
    for (int s = 0; s < n_steps; ++s) {
      const int64_t kk = k0 + 32 * s;
      const int64_t left = a.k - kk;
      const __mmask32 m = left >= 32 ? __mmask32(~0u) : __mmask32((1u << left) - 1);
      __m512i r[16];
      for (int i = 0; i < 16; ++i) {
        const int64_t row = o + 16 * t + i;
        r[i] =
            row < a.out ? _mm512_maskz_loadu_epi16(m, w + row * a.k + kk) : _mm512_setzero_si512();
      }
      transpose16(r);
      uint16_t* dst = panel + (int64_t(t) * n_steps + s) * kTileElems;
      for (int p = 0; p < 16; ++p) _mm512_store_si512(dst + 32 * p, r[p]);
    }
  }
}

thread_local Buffer t_panel;  // per worker thread: grows once to the panel size

}  // namespace

bool amx_request_permission() {
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
}

// Packed x: blocks of 32 tokens (zero-padded past n) x k steps of 32; per (16-token block,
// step): hi tile then lo tile, 1 KiB each.
size_t amx_packed_x_bytes(int64_t n, int64_t k) {
  return size_t(round_up(n, 32) / 16 * round_up(k, 32) / 32) * 2 * kTileElems * 2;
}

void amx_pack_x(uint16_t* packed, const float* x, int64_t n, int64_t k, int64_t r_begin,
                int64_t r_end) {
  const int64_t steps = round_up(k, 32) / 32;
  if (r_end == n) r_end = round_up(n, 32);  // the last thread also writes the zero padding
  for (int64_t r = r_begin; r < r_end; ++r) {
    const float* src = x + r * k;
    for (int64_t s = 0; s < steps; ++s) {
      uint16_t* hi = packed + ((r / 16 * steps + s) * 2) * kTileElems + (r % 16) * 32;
      uint16_t* lo = hi + kTileElems;
      if (r >= n) {
        _mm512_store_si512(hi, _mm512_setzero_si512());
        _mm512_store_si512(lo, _mm512_setzero_si512());
        continue;
      }
      const int64_t left = k - 32 * s;
      const __mmask16 m0 =
          left >= 16 ? __mmask16(0xffff) : __mmask16((1u << std::max<int64_t>(left, 0)) - 1);
      const __mmask16 m1 =
          left >= 32 ? __mmask16(0xffff) : __mmask16((1u << std::max<int64_t>(left - 16, 0)) - 1);
      const __m512 x0 = _mm512_maskz_loadu_ps(m0, src + 32 * s);
      const __m512 x1 = _mm512_maskz_loadu_ps(m1, src + 32 * s + 16);
      const __m512bh h = _mm512_cvtne2ps_pbh(x1, x0);  // RNE; low half = x0
      const __m512i hv = __m512i(h);
      const __m512 h0 = _mm512_castsi512_ps(
          _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_castsi512_si256(hv)), 16));
      const __m512 h1 = _mm512_castsi512_ps(
          _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(hv, 1)), 16));
      const __m512bh l = _mm512_cvtne2ps_pbh(_mm512_sub_ps(x1, h1), _mm512_sub_ps(x0, h0));
      _mm512_store_si512(hi, hv);
      _mm512_store_si512(lo, __m512i(l));
    }
  }
}

void matmul_cols_amx(const MatmulArgs& a, const uint16_t* packed_x, int64_t o_begin,
                     int64_t o_end) {
  const int64_t steps_total = round_up(a.k, 32) / 32;
  const int64_t n32 = round_up(a.n, 32);
  const int64_t ldy = a.out * 4;
  const size_t panel_bytes = size_t(kOc / 16 * kKc / 32) * kTileElems * 2;
  if (t_panel.size() < panel_bytes) t_panel.reserve(panel_bytes);
  uint16_t* panel = static_cast<uint16_t*>(t_panel.data());
  alignas(64) float edge[32 * 32];      // C for blocks that overhang y's edges
  alignas(64) float bias_tile[2][256];  // bias broadcast to 16 rows per 16-output tile
  configure_tiles();

  for (int64_t oc = o_begin; oc < o_end; oc += kOc) {
    const int64_t oc_end = std::min(oc + kOc, o_end);
    const int n_tiles = int(round_up(oc_end - oc, 32) / 16);
    for (int64_t s0 = 0; s0 < steps_total; s0 += kKc / 32) {
      const int n_steps = int(std::min<int64_t>(kKc / 32, steps_total - s0));
      const bool first = s0 == 0;
      pack_b(panel, a, oc, n_tiles, s0 * 32, n_steps);
      for (int64_t j = 0; j < n32; j += 32) {
        const uint16_t* ablk0 = packed_x + ((j / 16) * steps_total + s0) * 2 * kTileElems;
        const uint16_t* ablk1 = ablk0 + steps_total * 2 * kTileElems;
        for (int t = 0; t < n_tiles; t += 2) {
          const int64_t o = oc + 16 * t;
          // Ragged blocks (past n or past out) go through `edge`; the rest touch y directly.
          const bool ragged = j + 32 > a.n || o + 32 > oc_end;
          float* cbase = ragged ? edge : a.y + j * a.out + o;
          const int64_t ldc = ragged ? 32 * 4 : ldy;
          if (ragged) {
            const int64_t rows = std::min<int64_t>(32, a.n - j),
                          cols = std::min<int64_t>(32, oc_end - o);
            std::fill(edge, edge + 32 * 32, 0.0f);
            if (!first)
              for (int64_t r = 0; r < rows; ++r)
                std::memcpy(edge + r * 32, a.y + (j + r) * a.out + o, size_t(cols) * 4);
          }
          if (first && a.bias) {
            for (int h = 0; h < 2; ++h)
              for (int c = 0; c < 16; ++c) {
                const float b = o + 16 * h + c < a.out ? bias_at(a, o + 16 * h + c) : 0.0f;
                for (int r = 0; r < 16; ++r) bias_tile[h][r * 16 + c] = b;
              }
            _tile_loadd(0, bias_tile[0], 64);
            _tile_loadd(1, bias_tile[1], 64);
            _tile_loadd(2, bias_tile[0], 64);
            _tile_loadd(3, bias_tile[1], 64);
          } else if (first && !ragged) {
            _tile_zero(0);
            _tile_zero(1);
            _tile_zero(2);
            _tile_zero(3);
          } else {
            _tile_loadd(0, cbase, ldc);
            _tile_loadd(1, cbase + 16, ldc);
            _tile_loadd(2, reinterpret_cast<char*>(cbase) + 16 * ldc, ldc);
            _tile_loadd(3, reinterpret_cast<char*>(cbase) + 16 * ldc + 64, ldc);
          }
          const uint16_t* b0 = panel + int64_t(t) * n_steps * kTileElems;
          const uint16_t* b1 = b0 + int64_t(n_steps) * kTileElems;
          for (int s = 0; s < n_steps; ++s) {
            _tile_loadd(6, b0 + s * kTileElems, 64);
            _tile_loadd(7, b1 + s * kTileElems, 64);
            _tile_loadd(4, ablk0 + s * 2 * kTileElems, 64);
            _tile_loadd(5, ablk1 + s * 2 * kTileElems, 64);
            _tile_dpbf16ps(0, 4, 6);
            _tile_dpbf16ps(1, 4, 7);
            _tile_dpbf16ps(2, 5, 6);
            _tile_dpbf16ps(3, 5, 7);
            _tile_loadd(4, ablk0 + (s * 2 + 1) * kTileElems, 64);
            _tile_loadd(5, ablk1 + (s * 2 + 1) * kTileElems, 64);
            _tile_dpbf16ps(0, 4, 6);
            _tile_dpbf16ps(1, 4, 7);
            _tile_dpbf16ps(2, 5, 6);
            _tile_dpbf16ps(3, 5, 7);
          }
          _tile_stored(0, cbase, ldc);
          _tile_stored(1, cbase + 16, ldc);
          _tile_stored(2, reinterpret_cast<char*>(cbase) + 16 * ldc, ldc);
          _tile_stored(3, reinterpret_cast<char*>(cbase) + 16 * ldc + 64, ldc);
          if (ragged) {
            const int64_t rows = std::min<int64_t>(32, a.n - j),
                          cols = std::min<int64_t>(32, oc_end - o);
            for (int64_t r = 0; r < rows; ++r)
              std::memcpy(a.y + (j + r) * a.out + o, edge + r * 32, size_t(cols) * 4);
          }
        }
      }
    }
  }
  _tile_release();
}

}  // namespace hearth::cpu::detail

#if defined(__clang__)
#pragma clang attribute pop
#endif

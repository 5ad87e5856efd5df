// TMA descriptors (driver entry point loaded once) and the decode's argument checks that
// turn DecodeArgs into the kernels' views: Q maps, output strides, DCP inputs.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <mutex>

#include "kbmla/decode.hpp"
#include "src/common/rows.hpp"
#include "src/sm90/decode/kernel.hpp"

namespace kbmla::detail {

inline bool aligned(const void* p, size_t a) { return reinterpret_cast<uintptr_t>(p) % a == 0; }

// bf16 tensor map with 128-byte swizzle and 64 x 64 boxes over dims (innermost first).
void encode_bf16_map(CUtensorMap* map, const void* base, int rank, const cuuint64_t* dims, const cuuint64_t* strides,
                     const cuuint32_t* box, const char* what);
// Any element type and swizzle (the fp8 caches' and e4m3 Q's byte maps).
void encode_tiled(CUtensorMap* map, CUtensorMapDataType dtype, CUtensorMapSwizzle swizzle, const void* base, int rank,
                  const cuuint64_t* dims, const cuuint64_t* strides, const cuuint32_t* box, const char* what);

// The element strides a RowStrides stands for (dense: rows of `row_elems`), checked: each
// stride of a dimension with more than one element positive and a multiple of `multiple`.
RowStridesView resolve_row_strides(const RowStrides& s, int batch, int q_len, int heads, int64_t row_elems,
                                   int64_t multiple, const char* name, const char* who = "decode");

// The Q maps of a decode call. Engines pass the same Q buffers every step, so the last
// maps are kept per plan and re-encoded only when a pointer or a stride changes (a driver
// call on the critical path of small decodes).
struct QMapCache {
  std::mutex mutex;
  const void* q = nullptr;
  const void* q_pe = nullptr;
  int64_t q_row = 0, q_pe_row = 0;
  const void* q8 = nullptr;  // per-block fp8: the e4m3 latent part (the quantiser's, or the caller's)
  int64_t q8_row_bytes = 0;  // its row stride
  int box_rows = 0;          // the Q boxes' rows (bf16 and per-block maps)
  // Which function made the maps: one plan's calls may switch between them (the per-tensor
  // fp8 kernel's staged bf16 Q, the quantiser's or the caller's e4m3 Q), and the other keys
  // can coincide (the same buffer as bf16 or e4m3 rows of equal stride).
  enum class Kind { kNone, kBf16, kE4m3, kPerBlock } kind = Kind::kNone;
  sm90::QMaps maps{};
};

// Q as given: one tensor, or latent (q_nope) + rope (q_pe); checked (pointers, strides
// that flatten to one row stride).
struct QSource {
  bool split = false;
  int64_t latent_cols = 0;  // columns of q: d_qk, or 512 when q_pe holds the rope part
  int64_t rows = 0;         // batch x q_len x heads
  int64_t q_row = 0, pe_row = 0;  // row strides (elements)
};
QSource check_q(const DecodeConfig& c, int batch, const DecodeArgs& a);

// Checks a Q the caller gives in e4m3 (fp8 caches; DecodeArgs::q_dtype): one tensor, q_pe
// null, rows flattening to one stride that is a multiple of 16 bytes. Returns that stride.
int64_t check_e4m3_q(const DecodeConfig& c, int batch, const DecodeArgs& a);

// The map of e4m3 Q rows (d_qk bytes each, `row_stride` bytes apart) at q8: the quantiser's
// output in the workspace, or the caller's e4m3 Q; kept per plan.
void fp8_q_maps_for(const DecodeConfig& c, int64_t rows, const void* q8, int64_t row_stride, QMapCache& cache,
                    sm90::QMaps& maps, int& q_pe_col);

// The per-block cache's Q in e4m3 (DecodeArgs::q_dtype): the latent part in q (bytes, rows
// of q_row bytes), the rope part in q_pe (bf16, rows of pe_row elements), both checked.
QSource check_e4m3_block_q(const DecodeConfig& c, int batch, const DecodeArgs& a);

// Per-block fp8 caches: the map of the e4m3 latent part (q8: [rows][512] of q8_row_bytes a
// row, the quantiser's in the workspace or the caller's) and that of the bf16 rope part as
// bytes (128-byte boxes, 128-byte swizzle), from q's columns 512..575 or from q_pe;
// q_pe_col: the rope's first byte column (1024 or 0). box_rows: the kernel's Q tile rows
// (64, or 16 for the kernel of at most 16 rows: fp8_block_narrow).
void fp8_block_q_maps_for(const QSource& q, const DecodeArgs& a, const void* q8, int64_t q8_row_bytes, int box_rows,
                          QMapCache& cache, sm90::QMaps& maps, int& q_pe_col);

// Checks the bf16 Q (one tensor, or latent + rope) and returns its maps (boxes of 64
// columns x box_rows rows: the bf16 kernel's 64-row tiles, or the per-tensor fp8
// split-role kernel's 32-row staging halves) and the rope column.
void q_maps_for(const DecodeConfig& c, int batch, const DecodeArgs& a, QMapCache& cache, sm90::QMaps& maps,
                int& q_pe_col, int box_rows = sm90::kRowsPerCta);

// Checks out / lse (pointers, strides, dtype, base) and the DCP inputs, and returns the
// kernels' views of them.
OutputView output_view(const DecodeConfig& c, int batch, const DecodeArgs& a, const char* who = "decode");
KeyVisibility key_visibility(const DecodeConfig& c, const DecodeArgs& a);

}  // namespace kbmla::detail

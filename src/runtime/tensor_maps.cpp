#include "src/runtime/tensor_maps.hpp"

#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include "kbmla/error.hpp"
#include "src/sm90/decode/config.hpp"
#include "src/sm90/decode/config_fp8.hpp"

// Another promotion for an A/B against the old maps: build the library with
// -DKBMLA_L2_PROMOTION=CU_TENSOR_MAP_L2_PROMOTION_L2_256B.
#ifndef KBMLA_L2_PROMOTION
#define KBMLA_L2_PROMOTION CU_TENSOR_MAP_L2_PROMOTION_L2_128B
#endif

namespace kbmla::detail {

namespace {

PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* ptr = nullptr;
    cudaDriverEntryPointQueryResult status{};
    cudaError_t err = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &ptr, 12000, cudaEnableDefault, &status);
    require(err == cudaSuccess && status == cudaDriverEntryPointSuccess && ptr != nullptr,
            "cannot load cuTensorMapEncodeTiled from the CUDA driver (driver too old for CUDA 12 tensor maps?)");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(ptr);
  }();
  return fn;
}

// The one row stride (elements) under which Q's (batch, token, head) rows are evenly
// spaced: TMA loads 64 consecutive rows of a request as one box.
int64_t flat_row_stride(const RowStrides& s, int batch, int q_len, int heads, int64_t cols, const char* name,
                        int64_t multiple) {
  // One row (batch, q_len and heads all 1): its strides are never used.
  if (s.dense() || int64_t{batch} * q_len * heads == 1) return cols;
  const int64_t rs = heads > 1 ? s.head : (q_len > 1 ? s.token : s.batch);
  const bool flat = (heads == 1 || s.head == rs) && (q_len == 1 || s.token == heads * rs) &&
                    (batch == 1 || s.batch == int64_t{q_len} * heads * rs);
  require(flat, "decode: ", name, " strides (batch ", s.batch, ", token ", s.token, ", head ", s.head,
          ") do not flatten to one row stride: TMA reads Q by rows, so token must be heads x head and batch q_len x "
          "token (pass a copy in that layout, e.g. .contiguous())");
  require(rs >= cols && rs % multiple == 0, "decode: ", name, " row stride (", rs, " elements) must be >= ", cols,
          " and a multiple of ", multiple, " (16 bytes, for TMA)");
  return rs;
}

void encode_q_map(CUtensorMap* map, const void* base, int64_t rows, int64_t cols, int64_t row_stride, int box_rows,
                  const char* name) {
  // The map's extent in rows ends at the last row's start + its columns, which may be
  // short of a full row stride: TMA zero-fills reads beyond it, which land only in rows
  // >= the request's rows (ignored).
  const cuuint64_t dims[2] = {cuuint64_t(cols), cuuint64_t(rows)};
  const cuuint64_t strides[1] = {cuuint64_t(row_stride) * 2};
  const cuuint32_t box[2] = {sm90::kBoxCols, cuuint32_t(box_rows)};
  encode_bf16_map(map, base, 2, dims, strides, box, name);
}

}  // namespace

void encode_bf16_map(CUtensorMap* map, const void* base, int rank, const cuuint64_t* dims, const cuuint64_t* strides,
                     const cuuint32_t* box, const char* what) {
  encode_tiled(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, CU_TENSOR_MAP_SWIZZLE_128B, base, rank, dims, strides, box, what);
}

// Every box row the decode loads is at most 128 bytes wide, and the cache rows it comes from are
// 576, 656 or 1,152 bytes apart, so a row's 128 bytes straddle 256-byte lines; promoting to 256
// bytes (inferred, not traced) fetches lines that the neighbouring boxes read again later.
// Measured on an H200 with 132 SMs streaming fp8 pages of 64 tokens (bench/gpc_probe.cu,
// bench/NOTES.md v61): the decode's four latent boxes and rope box per page 4.21-4.36 TB/s with
// 256-byte promotion, 4.54-4.62 with 128-byte, against 4.60-4.65 for one bulk copy of each page.
void encode_tiled(CUtensorMap* map, CUtensorMapDataType dtype, CUtensorMapSwizzle swizzle, const void* base, int rank,
                  const cuuint64_t* dims, const cuuint64_t* strides, const cuuint32_t* box, const char* what) {
  const cuuint32_t elem_strides[3] = {1, 1, 1};
  CUresult r = tensor_map_encoder()(map, dtype, rank, const_cast<void*>(base), dims, strides, box, elem_strides,
                                    CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, KBMLA_L2_PROMOTION,
                                    CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  require(r == CUDA_SUCCESS, "cuTensorMapEncodeTiled failed for ", what, " (CUresult ", int(r), ")");
}

RowStridesView resolve_row_strides(const RowStrides& s, int batch, int q_len, int heads, int64_t row_elems,
                                   int64_t multiple, const char* name, const char* who) {
  if (s.dense()) return {int64_t{q_len} * heads * row_elems, int64_t{heads} * row_elems, row_elems};
  auto check = [&](int64_t stride, int extent, const char* dim) {
    require(extent == 1 || (stride > 0 && stride % multiple == 0), who, ": ", name, " ", dim, " stride (", stride,
            ") must be positive and a multiple of ", multiple, " elements");
  };
  check(s.batch, batch, "batch");
  check(s.token, q_len, "token");
  check(s.head, heads, "head");
  return {s.batch, s.token, s.head};
}

QSource check_q(const DecodeConfig& c, int batch, const DecodeArgs& a) {
  require(a.q != nullptr && aligned(a.q, 16), "decode: q must be a non-null, 16-byte aligned device pointer");
  QSource q;
  q.split = a.q_pe != nullptr;
  require(!q.split || c.d_qk == 576, "decode: q_pe is given but d_qk is ", c.d_qk, " (no rope part); pass q alone");
  require(!q.split || aligned(a.q_pe, 16), "decode: q_pe must be 16-byte aligned");
  require(q.split || a.q_pe_strides.dense(), "decode: q_pe_strides are set but q_pe is null");
  q.latent_cols = q.split ? 512 : c.d_qk;
  q.rows = int64_t{batch} * c.q_len * c.heads;
  q.q_row = flat_row_stride(a.q_strides, batch, c.q_len, c.heads, q.latent_cols, q.split ? "q (q_nope)" : "q", 8);
  q.pe_row = q.split ? flat_row_stride(a.q_pe_strides, batch, c.q_len, c.heads, 64, "q_pe", 8) : 0;
  return q;
}

int64_t check_e4m3_q(const DecodeConfig& c, int batch, const DecodeArgs& a) {
  require(a.q != nullptr && aligned(a.q, 16), "decode: q must be a non-null, 16-byte aligned device pointer");
  require(a.q_pe == nullptr && a.q_pe_strides.dense(),
          "decode: an e4m3 Q comes as one tensor of d_qk bytes per row; q_pe must be null");
  return flat_row_stride(a.q_strides, batch, c.q_len, c.heads, c.d_qk, "q (e4m3)", 16);
}

QSource check_e4m3_block_q(const DecodeConfig& c, int batch, const DecodeArgs& a) {
  require(a.q != nullptr && aligned(a.q, 16), "decode: q must be a non-null, 16-byte aligned device pointer");
  require(a.q_pe != nullptr && aligned(a.q_pe, 16),
          "decode: an e4m3 Q for the per-block cache comes as its latent part in e4m3 (q, 512 bytes a row) and its "
          "rope part in bf16 (q_pe, 64 values a row); q_pe must be a non-null, 16-byte aligned device pointer");
  QSource q;
  q.split = true;
  q.latent_cols = sm90::kDqkNoRope;
  q.rows = int64_t{batch} * c.q_len * c.heads;
  q.q_row = flat_row_stride(a.q_strides, batch, c.q_len, c.heads, sm90::kDqkNoRope, "q (e4m3 latent)", 16);
  q.pe_row = flat_row_stride(a.q_pe_strides, batch, c.q_len, c.heads, 64, "q_pe", 8);
  return q;
}

void q_maps_for(const DecodeConfig& c, int batch, const DecodeArgs& a, QMapCache& cache, sm90::QMaps& maps,
                int& q_pe_col, int box_rows) {
  const QSource q = check_q(c, batch, a);
  q_pe_col = q.split ? 0 : sm90::kDqkNoRope;
  std::lock_guard<std::mutex> lock(cache.mutex);
  if (cache.q != a.q || cache.q_pe != a.q_pe || cache.q_row != q.q_row || cache.q_pe_row != q.pe_row ||
      cache.kind != QMapCache::Kind::kBf16 || cache.box_rows != box_rows) {
    encode_q_map(&cache.maps.latent, a.q, q.rows, q.latent_cols, q.q_row, box_rows, "q");
    if (q.split) {
      encode_q_map(&cache.maps.rope, a.q_pe, q.rows, 64, q.pe_row, box_rows, "q_pe");
    } else {
      cache.maps.rope = cache.maps.latent;
    }
    cache.q = a.q;
    cache.q_pe = a.q_pe;
    cache.q_row = q.q_row;
    cache.q_pe_row = q.pe_row;
    cache.q8 = nullptr;
    cache.box_rows = box_rows;
    cache.kind = QMapCache::Kind::kBf16;
  }
  maps = cache.maps;
}

void fp8_q_maps_for(const DecodeConfig& c, int64_t rows, const void* q8, int64_t row_stride, QMapCache& cache,
                    sm90::QMaps& maps, int& q_pe_col) {
  q_pe_col = sm90::kDqkNoRope;  // the rope box is columns 512..575 of the e4m3 rows
  std::lock_guard<std::mutex> lock(cache.mutex);
  if (cache.q != q8 || cache.q_row != row_stride || cache.kind != QMapCache::Kind::kE4m3) {
    // As the cache's maps (kv_cache.cpp): latent boxes of 128 bytes, the rope box of 64.
    const cuuint64_t dims[2] = {cuuint64_t(c.d_qk), cuuint64_t(rows)};
    const cuuint64_t strides[1] = {cuuint64_t(row_stride)};
    const cuuint32_t latent_box[2] = {sm90::fp8::kLatentBoxRowBytes, sm90::kRowsPerCta};
    encode_tiled(&cache.maps.latent, CU_TENSOR_MAP_DATA_TYPE_UINT8, CU_TENSOR_MAP_SWIZZLE_128B, q8, 2, dims, strides,
                 latent_box, "the e4m3 Q (latent)");
    const cuuint32_t rope_box[2] = {sm90::fp8::kBoxRowBytes, sm90::kRowsPerCta};
    encode_tiled(&cache.maps.rope, CU_TENSOR_MAP_DATA_TYPE_UINT8, CU_TENSOR_MAP_SWIZZLE_64B, q8, 2, dims, strides,
                 rope_box, "the e4m3 Q (rope)");
    cache.q = q8;
    cache.q_pe = nullptr;
    cache.q_row = row_stride;
    cache.q_pe_row = 0;
    cache.kind = QMapCache::Kind::kE4m3;
  }
  maps = cache.maps;
}

void fp8_block_q_maps_for(const QSource& q, const DecodeArgs& a, const void* q8, int64_t q8_row_bytes, int box_rows,
                          QMapCache& cache, sm90::QMaps& maps, int& q_pe_col) {
  q_pe_col = q.split ? 0 : 2 * sm90::kDqkNoRope;
  std::lock_guard<std::mutex> lock(cache.mutex);
  if (cache.q != a.q || cache.q_pe != a.q_pe || cache.q_row != q.q_row || cache.q_pe_row != q.pe_row ||
      cache.q8 != q8 || cache.q8_row_bytes != q8_row_bytes || cache.box_rows != box_rows ||
      cache.kind != QMapCache::Kind::kPerBlock) {
    // 128-byte boxes with the 128-byte swizzle, as the cache's (kv_cache.cpp).
    const cuuint32_t box[2] = {sm90::fp8::kLatentBoxRowBytes, cuuint32_t(box_rows)};
    const cuuint64_t latent_dims[2] = {cuuint64_t(sm90::kDqkNoRope), cuuint64_t(q.rows)};
    const cuuint64_t latent_strides[1] = {cuuint64_t(q8_row_bytes)};
    encode_tiled(&cache.maps.latent, CU_TENSOR_MAP_DATA_TYPE_UINT8, CU_TENSOR_MAP_SWIZZLE_128B, q8, 2, latent_dims,
                 latent_strides, box, "the e4m3 Q (latent)");
    // The rope values as bytes; the extent ends at the last row's rope (see encode_q_map).
    const void* rope_base = q.split ? a.q_pe : a.q;
    const int64_t rope_row_bytes = 2 * (q.split ? q.pe_row : q.q_row);
    const cuuint64_t rope_dims[2] = {cuuint64_t(q_pe_col + 128), cuuint64_t(q.rows)};
    const cuuint64_t rope_strides[1] = {cuuint64_t(rope_row_bytes)};
    encode_tiled(&cache.maps.rope, CU_TENSOR_MAP_DATA_TYPE_UINT8, CU_TENSOR_MAP_SWIZZLE_128B, rope_base, 2, rope_dims,
                 rope_strides, box, "q's rope part (bytes)");
    cache.q = a.q;
    cache.q_pe = a.q_pe;
    cache.q_row = q.q_row;
    cache.q_pe_row = q.pe_row;
    cache.q8 = q8;
    cache.q8_row_bytes = q8_row_bytes;
    cache.box_rows = box_rows;
    cache.kind = QMapCache::Kind::kPerBlock;
  }
  maps = cache.maps;
}

OutputView output_view(const DecodeConfig& c, int batch, const DecodeArgs& a, const char* who) {
  require(a.out_dtype == OutDtype::kBFloat16, who, ": out_dtype ", int(a.out_dtype),
          " is not supported; supported: bfloat16");
  require(a.out != nullptr && aligned(a.out, 16), who, ": out must be a non-null, 16-byte aligned device pointer");
  require(a.lse != nullptr && aligned(a.lse, 4), who, ": lse must be a non-null, 4-byte aligned device pointer");
  require(a.lse_base == LseBase::kE || a.lse_base == LseBase::k2, who, ": lse_base ", int(a.lse_base),
          " is not one of kE, k2");
  OutputView v{};
  v.out = a.out;
  v.lse = a.lse;
  v.out_strides = resolve_row_strides(a.out_strides, batch, c.q_len, c.heads, c.d_v, 4, "out", who);
  v.lse_strides = resolve_row_strides(a.lse_strides, batch, c.q_len, c.heads, 1, 1, "lse", who);
  v.lse_scale = a.lse_base == LseBase::kE ? 0.69314718055994531f : 1.f;
  v.heads = FastDivmod(c.heads);
  return v;
}

KeyVisibility key_visibility(const DecodeConfig& c, const DecodeArgs& a) {
  KeyVisibility v{};
  v.causal = c.causal;
  v.q_len = c.q_len;
  v.heads = FastDivmod(c.heads);
  v.world = c.dcp_world;
  v.rank = c.dcp_rank;
  v.world_div = FastDivmod(c.dcp_world);
  v.interleaved = c.dcp_layout == DcpLayout::kInterleaved;
  if (c.dcp_world > 1) {
    require(a.dcp_global_seqlens != nullptr, "decode: dcp_world is ", c.dcp_world,
            " but dcp_global_seqlens is null (int32 [batch] on the device)");
    require(v.interleaved || a.dcp_kv_offsets != nullptr,
            "decode: the contiguous DCP layout needs dcp_kv_offsets (int32 [batch] on the device: the global "
            "position of this rank's local key 0)");
    v.global_seqlens = a.dcp_global_seqlens;
    v.kv_offsets = a.dcp_kv_offsets;
  } else {
    require(a.dcp_global_seqlens == nullptr && a.dcp_kv_offsets == nullptr,
            "decode: dcp_global_seqlens / dcp_kv_offsets are set but dcp_world is 1");
  }
  return v;
}

}  // namespace kbmla::detail

// KvCache: the paged cache's checks and TMA descriptors.
#include <cuda.h>

#include <algorithm>
#include <cstring>

#include "kbmla/decode.hpp"
#include "kbmla/error.hpp"
#include "src/runtime/decode_internal.hpp"
#include "src/runtime/tensor_maps.hpp"
#include "src/sm90/decode/config_fp8.hpp"
#include "src/sm90/decode/config_fp8_block.hpp"

namespace kbmla {

static_assert(kv_token_bytes(KvDtype::kFp8E4m3PerBlock, 576) == int(sm90::fp8_block::kTokenBytes),
              "the public token size and the kernel's stage rows agree");

KvCache::KvCache(const void* data, int64_t num_pages, int page_size, int d_qk, KvDtype dtype)
    : data_(data), num_pages_(num_pages), page_size_(page_size), d_qk_(d_qk), dtype_(dtype) {
  require(data != nullptr, "KvCache: data is null");
  require(detail::aligned(data, 16), "KvCache: data must be 16-byte aligned for TMA");
  require(num_pages >= 1 && num_pages <= (int64_t{1} << 31) - 1, "KvCache: num_pages (", num_pages,
          ") must be in 1..2^31-1");
  require(detail::supported_page_size(page_size), "KvCache: page_size (", page_size,
          ") is not supported; supported: powers of two 1..256");
  require(num_pages <= (int64_t{1} << 31) / std::max(1, page_size / 64), "KvCache: num_pages (", num_pages,
          ") x page_size / 64 must be < 2^31 (pages are addressed in 64-token parts)");
  require(d_qk == 576 || d_qk == 512, "KvCache: d_qk (", d_qk, ") is not supported; supported: 576, 512");
  require(dtype == KvDtype::kBFloat16 || dtype == KvDtype::kFp8E4m3 || dtype == KvDtype::kFp8E4m3PerBlock,
          "KvCache: dtype (", int(dtype), ") is not one of kBFloat16, kFp8E4m3, kFp8E4m3PerBlock");
  require(dtype != KvDtype::kFp8E4m3PerBlock || d_qk == 576, "KvCache: the per-block fp8 cache has d_qk 576 (its "
          "656-byte token holds 512 latent and 64 rope values), got d_qk ", d_qk);
  static_assert(sizeof(CUtensorMap) == sizeof(tensor_map_) && sizeof(CUtensorMap) == sizeof(aux_map_),
                "tensor map storage");
  std::memset(aux_map_, 0, sizeof aux_map_);
  // Pages of 64 tokens or more are addressed as 64-token parts (the loader's "virtual
  // pages"); smaller pages are one box of page_size rows each.
  const int rows = std::min(page_size, sm90::kBlockTokens);
  const int64_t parts = num_pages * (page_size / rows);
  const cuuint64_t row_bytes = cuuint64_t(kv_token_bytes(dtype, d_qk));
  const cuuint64_t strides[2] = {row_bytes, row_bytes * rows};
  if (dtype == KvDtype::kFp8E4m3PerBlock) {
    // The rows as bytes: 128-byte boxes (latent and rope, 128-byte swizzle) and the 16 bytes
    // of scales (no swizzle) at their column offsets (config_fp8_block.hpp).
    const cuuint64_t dims[3] = {row_bytes, cuuint64_t(rows), cuuint64_t(parts)};
    const cuuint32_t box[3] = {sm90::fp8::kLatentBoxRowBytes, cuuint32_t(rows), 1};
    detail::encode_tiled(reinterpret_cast<CUtensorMap*>(tensor_map_), CU_TENSOR_MAP_DATA_TYPE_UINT8,
                         CU_TENSOR_MAP_SWIZZLE_128B, data, 3, dims, strides, box, "the KV cache (per-block fp8)");
    const cuuint32_t scale_box[3] = {sm90::fp8_block::kScaleRowBytes, cuuint32_t(rows), 1};
    detail::encode_tiled(reinterpret_cast<CUtensorMap*>(aux_map_), CU_TENSOR_MAP_DATA_TYPE_UINT8,
                         CU_TENSOR_MAP_SWIZZLE_NONE, data, 3, dims, strides, scale_box,
                         "the KV cache's scales (per-block fp8)");
    return;
  }
  const cuuint64_t dims[3] = {cuuint64_t(d_qk), cuuint64_t(rows), cuuint64_t(parts)};
  if (dtype == KvDtype::kFp8E4m3) {
    // The latent columns in boxes of 128 (128-byte rows, 128-byte swizzle: half the TMA
    // operations and L2 requests of 64-byte boxes), the rope columns (d_qk 576) in one box
    // of 64 (64-byte swizzle); config_fp8.hpp.
    // One box form for every tile: v30's 32-row boxes for the narrow tiles (faster under
    // 256-byte L2 promotion) measured level or slower than these 64-row ones under 128-byte
    // promotion (B64_L32768 1.7-3.0 % slower on three H200s, the rest within +-2 %; bench/NOTES.md v62).
    const cuuint32_t latent_box[3] = {sm90::fp8::kLatentBoxRowBytes, cuuint32_t(rows), 1};
    detail::encode_tiled(reinterpret_cast<CUtensorMap*>(tensor_map_), CU_TENSOR_MAP_DATA_TYPE_UINT8,
                         CU_TENSOR_MAP_SWIZZLE_128B, data, 3, dims, strides, latent_box, "the KV cache (fp8 latent)");
    if (d_qk > sm90::kDqkNoRope) {
      const cuuint32_t rope_box[3] = {sm90::fp8::kBoxRowBytes, cuuint32_t(rows), 1};
      detail::encode_tiled(reinterpret_cast<CUtensorMap*>(aux_map_), CU_TENSOR_MAP_DATA_TYPE_UINT8,
                           CU_TENSOR_MAP_SWIZZLE_64B, data, 3, dims, strides, rope_box, "the KV cache (fp8 rope)");
    }
    return;
  }
  const cuuint32_t box[3] = {sm90::kBoxCols, cuuint32_t(rows), 1};
  detail::encode_bf16_map(reinterpret_cast<CUtensorMap*>(tensor_map_), data, 3, dims, strides, box, "the KV cache");
}

}  // namespace kbmla

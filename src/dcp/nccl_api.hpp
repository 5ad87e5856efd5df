// NCCL loaded at run time (kbmla does not link it): the engine's own libnccl is reused
// when it is already loaded, and a machine without NCCL still runs everything else.
#pragma once

#if KBMLA_HAVE_NCCL
#include <nccl.h>

namespace kbmla::detail {

struct NcclApi {
  decltype(&ncclAllGather) all_gather;
  decltype(&ncclGetErrorString) error_string;
  decltype(&ncclCommInitAll) comm_init_all;  // tests: one process, several devices
  decltype(&ncclCommDestroy) comm_destroy;
  decltype(&ncclGroupStart) group_start;
  decltype(&ncclGroupEnd) group_end;
  decltype(&ncclCommCount) comm_count;
};

// Loads $KBMLA_NCCL_LIBRARY, else libnccl.so.2, once; throws kbmla::Error naming what was
// tried and dlerror() when neither loads.
const NcclApi& nccl_api();

// Throws kbmla::Error with NCCL's text for a failed call.
void check_nccl(ncclResult_t r, const char* what);

}  // namespace kbmla::detail
#endif  // KBMLA_HAVE_NCCL

// What the C API's translation units share beyond rdmx.h (private to lib/capi).
#pragma once

#include <rdmx/rdmx.h>

#include <rdmx/win/poll_core.hpp>

namespace rdmx::capi {

// The PollCore behind a C core handle (nullptr for nullptr). Defined in rdmx_c.cpp.
win::PollCore* poll_core_of(rdmx_core* c) noexcept;

}  // namespace rdmx::capi

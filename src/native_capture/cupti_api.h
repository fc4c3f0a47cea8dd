// The few CUPTI calls the native capture makes, behind an interface: the injection library uses
// the real libcupti (cupti_api_real.cc, loaded with dlopen), tests a fake that drives the
// recorder's real callback with CUPTI-shaped data, so the decoding runs without a GPU.
#pragma once

#include <cupti.h>

#include <cstdint>
#include <memory>
#include <string>

namespace vramscope::capture {

class CuptiApi {
 public:
  virtual ~CuptiApi() = default;
  virtual CUptiResult Subscribe(CUpti_SubscriberHandle* subscriber, CUpti_CallbackFunc callback,
                                void* userdata) = 0;
  virtual CUptiResult EnableCallback(uint32_t enable, CUpti_SubscriberHandle subscriber,
                                     CUpti_CallbackDomain domain, CUpti_CallbackId cbid) = 0;
  virtual CUptiResult EnableDomain(uint32_t enable, CUpti_SubscriberHandle subscriber,
                                   CUpti_CallbackDomain domain) = 0;
  virtual CUptiResult Unsubscribe(CUpti_SubscriberHandle subscriber) = 0;
  virtual CUptiResult GetTimestamp(uint64_t* timestamp) = 0;
  virtual CUptiResult GetDeviceId(CUcontext context, uint32_t* device) = 0;
  // "CUPTI_ERROR_..." for a result; never null.
  virtual const char* ResultString(CUptiResult result) = 0;
  // Where the library came from (a path), for the trace's process facts.
  virtual std::string Describe() const = 0;
};

// Loads libcupti with dlopen: the library NVTX_INJECTION64_PATH names when it is libcupti, then
// the one found when vramscope was built, then the sonames on the loader's search path. Null with
// `error` set (one sentence) when none loads or a function is missing.
std::unique_ptr<CuptiApi> LoadCupti(std::string* error);

}  // namespace vramscope::capture

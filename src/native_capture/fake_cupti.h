// A fake CUPTI for the native recorder, without a GPU: it calls the recorder's real callback
// with the CUPTI-shaped data the driver would pass (CUpti_CallbackData holding the driver API's
// *_params structs from generated_cuda_meta.h, cbids from cupti_driver_cbid.h; CUpti_NvtxData for
// NVTX). Used by capture_recorder_test and bench/recorder_bench.
#pragma once

#include <cupti.h>

#include <atomic>
#include <cstdint>
#include <set>
#include <string>

#include "native_capture/cupti_api.h"

namespace vramscope::capture {

inline const CUcontext kContext0 = reinterpret_cast<CUcontext>(0x1000);
inline const CUcontext kContext3 = reinterpret_cast<CUcontext>(0x3000);

class FakeCupti final : public CuptiApi {
 public:
  CUptiResult subscribe_result = CUPTI_SUCCESS;
  CUptiResult enable_result = CUPTI_SUCCESS;
  std::set<CUpti_CallbackId> driver_enabled;
  std::set<CUpti_CallbackDomain> domains_enabled;
  std::atomic<int> unsubscribes{0};
  int misdirected = 0;  // EnableCallback calls with another subscriber or domain (a bug)
  std::atomic<uint64_t> now_ns{1'000'000};

  CUptiResult Subscribe(CUpti_SubscriberHandle* subscriber, CUpti_CallbackFunc callback,
                        void* userdata) override {
    if (subscribe_result != CUPTI_SUCCESS) return subscribe_result;
    callback_ = callback;
    userdata_ = userdata;
    *subscriber = reinterpret_cast<CUpti_SubscriberHandle>(this);
    return CUPTI_SUCCESS;
  }
  CUptiResult EnableCallback(uint32_t enable, CUpti_SubscriberHandle subscriber,
                             CUpti_CallbackDomain domain, CUpti_CallbackId cbid) override {
    if (subscriber != reinterpret_cast<CUpti_SubscriberHandle>(this) ||
        domain != CUPTI_CB_DOMAIN_DRIVER_API) {
      ++misdirected;
    }
    if (enable_result != CUPTI_SUCCESS) return enable_result;
    if (enable != 0) driver_enabled.insert(cbid);
    return CUPTI_SUCCESS;
  }
  CUptiResult EnableDomain(uint32_t enable, CUpti_SubscriberHandle subscriber,
                           CUpti_CallbackDomain domain) override {
    if (enable != 0) domains_enabled.insert(domain);
    return CUPTI_SUCCESS;
  }
  CUptiResult Unsubscribe(CUpti_SubscriberHandle subscriber) override {
    ++unsubscribes;
    return CUPTI_SUCCESS;
  }
  CUptiResult GetTimestamp(uint64_t* timestamp) override {
    *timestamp = now_ns.fetch_add(1000);
    return CUPTI_SUCCESS;
  }
  CUptiResult GetDeviceId(CUcontext context, uint32_t* device) override {
    if (context == kContext0)
      *device = 0;
    else if (context == kContext3)
      *device = 3;
    else
      return CUPTI_ERROR_INVALID_CONTEXT;
    return CUPTI_SUCCESS;
  }
  const char* ResultString(CUptiResult result) override {
    return result == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED
               ? "CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED"
               : "CUPTI_ERROR_UNKNOWN";
  }
  std::string Describe() const override { return "fake"; }

  // What the driver does around an API call: CUPTI calls the subscriber at entry and exit of
  // each enabled callback.
  void Driver(CUpti_CallbackId cbid, const char* name, const void* params,
              CUresult result = CUDA_SUCCESS, CUcontext context = kContext0) {
    if (callback_ == nullptr || driver_enabled.count(cbid) == 0 || unsubscribes > 0) return;
    for (const auto site : {CUPTI_API_ENTER, CUPTI_API_EXIT}) {
      CUpti_CallbackData data{};
      data.callbackSite = site;
      data.functionName = name;
      data.functionParams = params;
      data.functionReturnValue = &result;
      data.context = context;
      callback_(userdata_, CUPTI_CB_DOMAIN_DRIVER_API, cbid, &data);
    }
  }
  void Nvtx(CUpti_CallbackId cbid, const char* name, const void* params,
            const void* result = nullptr) {
    if (callback_ == nullptr || domains_enabled.count(CUPTI_CB_DOMAIN_NVTX) == 0) return;
    CUpti_NvtxData data{name, params, result};
    callback_(userdata_, CUPTI_CB_DOMAIN_NVTX, cbid, &data);
  }

 private:
  CUpti_CallbackFunc callback_ = nullptr;
  void* userdata_ = nullptr;
};

}  // namespace vramscope::capture

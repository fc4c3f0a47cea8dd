#include <dlfcn.h>

#include <cstdlib>
#include <string>
#include <type_traits>
#include <vector>

#include "native_capture/cupti_api.h"

namespace vramscope::capture {

namespace {

class RealCupti final : public CuptiApi {
 public:
  using SubscribeFn = CUptiResult (*)(CUpti_SubscriberHandle*, CUpti_CallbackFunc, void*);
  using EnableCallbackFn = CUptiResult (*)(uint32_t, CUpti_SubscriberHandle, CUpti_CallbackDomain,
                                           CUpti_CallbackId);
  using EnableDomainFn = CUptiResult (*)(uint32_t, CUpti_SubscriberHandle, CUpti_CallbackDomain);
  using UnsubscribeFn = CUptiResult (*)(CUpti_SubscriberHandle);
  using GetTimestampFn = CUptiResult (*)(uint64_t*);
  using GetDeviceIdFn = CUptiResult (*)(CUcontext, uint32_t*);
  using GetResultStringFn = CUptiResult (*)(CUptiResult, const char**);

  bool Load(void* handle, std::string path, std::string* error) {
    path_ = std::move(path);
    bool ok = true;
    auto get = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(handle, name));
      if (fn == nullptr && ok) {
        ok = false;
        *error = path_ + " has no " + name + " (a CUPTI older than CUDA 11?)";
      }
    };
    get(subscribe_, "cuptiSubscribe");
    get(enable_callback_, "cuptiEnableCallback");
    get(enable_domain_, "cuptiEnableDomain");
    get(unsubscribe_, "cuptiUnsubscribe");
    get(get_timestamp_, "cuptiGetTimestamp");
    get(get_device_id_, "cuptiGetDeviceId");
    get(get_result_string_, "cuptiGetResultString");
    return ok;
  }

  CUptiResult Subscribe(CUpti_SubscriberHandle* subscriber, CUpti_CallbackFunc callback,
                        void* userdata) override {
    return subscribe_(subscriber, callback, userdata);
  }
  CUptiResult EnableCallback(uint32_t enable, CUpti_SubscriberHandle subscriber,
                             CUpti_CallbackDomain domain, CUpti_CallbackId cbid) override {
    return enable_callback_(enable, subscriber, domain, cbid);
  }
  CUptiResult EnableDomain(uint32_t enable, CUpti_SubscriberHandle subscriber,
                           CUpti_CallbackDomain domain) override {
    return enable_domain_(enable, subscriber, domain);
  }
  CUptiResult Unsubscribe(CUpti_SubscriberHandle subscriber) override {
    return unsubscribe_(subscriber);
  }
  CUptiResult GetTimestamp(uint64_t* timestamp) override { return get_timestamp_(timestamp); }
  CUptiResult GetDeviceId(CUcontext context, uint32_t* device) override {
    return get_device_id_(context, device);
  }
  const char* ResultString(CUptiResult result) override {
    const char* text = nullptr;
    if (get_result_string_(result, &text) != CUPTI_SUCCESS || text == nullptr) {
      return "an unknown CUPTI error";
    }
    return text;
  }
  std::string Describe() const override { return path_; }

 private:
  std::string path_;
  SubscribeFn subscribe_ = nullptr;
  EnableCallbackFn enable_callback_ = nullptr;
  EnableDomainFn enable_domain_ = nullptr;
  UnsubscribeFn unsubscribe_ = nullptr;
  GetTimestampFn get_timestamp_ = nullptr;
  GetDeviceIdFn get_device_id_ = nullptr;
  GetResultStringFn get_result_string_ = nullptr;
};

}  // namespace

std::unique_ptr<CuptiApi> LoadCupti(std::string* error) {
  std::vector<std::string> candidates;
  if (const char* nvtx = std::getenv("NVTX_INJECTION64_PATH");
      nvtx != nullptr && std::string(nvtx).find("libcupti") != std::string::npos) {
    candidates.emplace_back(nvtx);
  }
#ifdef VRAMSCOPE_CUPTI_BUILD_PATH
  candidates.emplace_back(VRAMSCOPE_CUPTI_BUILD_PATH);
#endif
#ifdef VRAMSCOPE_CUPTI_SONAME
  candidates.emplace_back(VRAMSCOPE_CUPTI_SONAME);
#endif
  candidates.emplace_back("libcupti.so");
  std::string tried;
  for (const std::string& path : candidates) {
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL);
    if (handle == nullptr) {
      const char* why = dlerror();
      if (!tried.empty()) tried += "; ";
      tried += why != nullptr ? why : path;
      continue;
    }
    auto api = std::make_unique<RealCupti>();
    if (!api->Load(handle, path, error)) return nullptr;
    return api;
  }
  *error = "cannot load libcupti (" + tried +
           "); install CUDA's CUPTI or set NVTX_INJECTION64_PATH to its libcupti.so";
  return nullptr;
}

}  // namespace vramscope::capture

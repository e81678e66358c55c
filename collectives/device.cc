#include "collectives/device.h"

#include <atomic>

namespace hora {
namespace {

constexpr int kDeviceKinds = 2;

std::atomic<const DeviceRuntime*>* Table() {
  static std::atomic<const DeviceRuntime*> table[kDeviceKinds] = {};
  return table;
}

}  // namespace

bool RegisterDeviceRuntime(Device device, const DeviceRuntime* runtime) {
  const int i = static_cast<int>(device);
  if (i >= 0 && i < kDeviceKinds) Table()[i].store(runtime);
  return true;
}

const DeviceRuntime* DeviceRuntimeFor(Device device) {
  const int i = static_cast<int>(device);
  return i >= 0 && i < kDeviceKinds ? Table()[i].load() : nullptr;
}

}  // namespace hora

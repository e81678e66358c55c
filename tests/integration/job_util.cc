#include "tests/integration/job_util.h"

#include <cstdlib>

namespace jobtest {

std::atomic<int> g_failures{0};
std::atomic<int> g_checks{0};
int g_rank = -1;

void Must(hora_status_t s, const char* what) {
  if (s != HORA_OK) {
    std::fprintf(stderr, "rank %d: %s failed: %s: %s\n", g_rank, what, hora_error_string(s),
                 hora_last_error());
    std::exit(2);
  }
}

size_t DtypeSize(hora_dtype_t t) { return hora::DataTypeSize(static_cast<hora::DataType>(t)); }
const char* DtypeName(hora_dtype_t t) { return hora::DataTypeName(static_cast<hora::DataType>(t)); }

double Get(const std::vector<char>& buf, hora_dtype_t t, size_t i) {
  const char* p = buf.data() + i * DtypeSize(t);
  switch (t) {
    case HORA_UINT8:
      return *reinterpret_cast<const uint8_t*>(p);
    case HORA_INT8:
      return *reinterpret_cast<const int8_t*>(p);
    case HORA_INT16:
      return *reinterpret_cast<const int16_t*>(p);
    case HORA_UINT16:
      return *reinterpret_cast<const uint16_t*>(p);
    case HORA_INT32:
      return *reinterpret_cast<const int32_t*>(p);
    case HORA_INT64:
      return static_cast<double>(*reinterpret_cast<const int64_t*>(p));
    case HORA_FLOAT16:
      return hora::HalfToFloat(*reinterpret_cast<const uint16_t*>(p));
    case HORA_BFLOAT16:
      return hora::Bfloat16ToFloat(*reinterpret_cast<const uint16_t*>(p));
    case HORA_FLOAT32:
      return *reinterpret_cast<const float*>(p);
    case HORA_FLOAT64:
      return *reinterpret_cast<const double*>(p);
    case HORA_BOOL:
      return *reinterpret_cast<const uint8_t*>(p) ? 1 : 0;
  }
  return 0;
}

void Set(std::vector<char>* buf, hora_dtype_t t, size_t i, double v) {
  char* p = buf->data() + i * DtypeSize(t);
  switch (t) {
    case HORA_UINT8:
      *reinterpret_cast<uint8_t*>(p) = static_cast<uint8_t>(v);
      break;
    case HORA_INT8:
      *reinterpret_cast<int8_t*>(p) = static_cast<int8_t>(v);
      break;
    case HORA_INT16:
      *reinterpret_cast<int16_t*>(p) = static_cast<int16_t>(v);
      break;
    case HORA_UINT16:
      *reinterpret_cast<uint16_t*>(p) = static_cast<uint16_t>(v);
      break;
    case HORA_INT32:
      *reinterpret_cast<int32_t*>(p) = static_cast<int32_t>(v);
      break;
    case HORA_INT64:
      *reinterpret_cast<int64_t*>(p) = static_cast<int64_t>(v);
      break;
    case HORA_FLOAT16:
      *reinterpret_cast<uint16_t*>(p) = hora::FloatToHalf(static_cast<float>(v));
      break;
    case HORA_BFLOAT16:
      *reinterpret_cast<uint16_t*>(p) = hora::FloatToBfloat16(static_cast<float>(v));
      break;
    case HORA_FLOAT32:
      *reinterpret_cast<float*>(p) = static_cast<float>(v);
      break;
    case HORA_FLOAT64:
      *reinterpret_cast<double*>(p) = v;
      break;
    case HORA_BOOL:
      *reinterpret_cast<uint8_t*>(p) = v != 0 ? 1 : 0;
      break;
  }
}

bool Close(double got, double want, hora_dtype_t t) {
  double tol = 0;
  if (t == HORA_FLOAT16) tol = 2e-3;
  if (t == HORA_BFLOAT16) tol = 1e-2;
  if (t == HORA_FLOAT32) tol = 1e-6;
  if (t == HORA_FLOAT64) tol = 1e-12;
  return std::fabs(got - want) <= tol * std::max(1.0, std::fabs(want));
}

hora_tensor_t Tensor(void* data, const std::vector<int64_t>& shape, hora_dtype_t t) {
  hora_tensor_t x;
  std::memset(&x, 0, sizeof(x));
  x.data = data;
  x.shape = shape.data();
  x.ndim = static_cast<int32_t>(shape.size());
  x.dtype = t;
  x.device = HORA_DEVICE_CPU;
  return x;
}

}  // namespace jobtest

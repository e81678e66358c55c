// Helpers for test jobs that run as real processes under horarun and use only hora.h.
#ifndef HORA_TESTS_INTEGRATION_JOB_UTIL_H_
#define HORA_TESTS_INTEGRATION_JOB_UTIL_H_

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "bindings/c/hora.h"
#include "common/reduce.h"

namespace jobtest {

extern std::atomic<int> g_failures;
extern std::atomic<int> g_checks;
extern int g_rank;

#define JOB_CHECK(cond, ...)                                                               \
  do {                                                                                     \
    ++::jobtest::g_checks;                                                                 \
    if (!(cond)) {                                                                         \
      ++::jobtest::g_failures;                                                             \
      std::fprintf(stderr, "FAIL rank %d %s:%d: ", ::jobtest::g_rank, __FILE__, __LINE__); \
      std::fprintf(stderr, __VA_ARGS__);                                                   \
      std::fprintf(stderr, "\n");                                                          \
    }                                                                                      \
  } while (0)

// Exits the process when a call that must succeed fails.
void Must(hora_status_t s, const char* what);

size_t DtypeSize(hora_dtype_t t);
const char* DtypeName(hora_dtype_t t);

// Typed element access through doubles (exact for the small integers the tests use).
double Get(const std::vector<char>& buf, hora_dtype_t t, size_t i);
void Set(std::vector<char>* buf, hora_dtype_t t, size_t i, double v);

// Tolerance for comparing a computed value against the reference.
bool Close(double got, double want, hora_dtype_t t);

hora_tensor_t Tensor(void* data, const std::vector<int64_t>& shape, hora_dtype_t t);

}  // namespace jobtest

#endif  // HORA_TESTS_INTEGRATION_JOB_UTIL_H_

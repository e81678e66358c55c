// The exchange, one round:
//   1. rank 0 puts "hora.coordinator" = "host:port" (PMIX_GLOBAL) and commits it;
//   2. every process joins one fence over the whole namespace with PMIX_COLLECT_DATA, so that
//      after it the value is held by every node's PMIx server;
//   3. every other rank gets the key from rank 0 (from its local server, no round trip).
// The fence and the get are PMIx's non-blocking forms, waited for against the caller's
// deadline: a rank that never comes (it died before hora_init) makes the others fail at the
// deadline rather than hang. PMIX_TIMEOUT is passed as well, but a server need not honour it.
// PMIx requires the arguments of a non-blocking call to live until its callback, and a
// callback may come after the deadline: each call's arguments and result live in a Pending
// that the callback shares, and PMIx_Finalize is skipped once a call has been abandoned.
#include "runtime/bootstrap/pmix/pmix_exchange.h"

#include <pmix.h>

#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <mutex>

#include "common/mutex.h"

namespace hora {
namespace {

constexpr char kKey[] = "hora.coordinator";

std::string PmixError(const char* what, pmix_status_t rc) {
  return std::string("PMIx: ") + what + " failed: " + PMIx_Error_string(rc);
}

struct Pending {
  Pending(const pmix_proc_t& p, int timeout_s, bool collect) : proc(p) {
    PMIX_INFO_CONSTRUCT(&info[0]);
    PMIX_INFO_CONSTRUCT(&info[1]);
    PMIX_INFO_LOAD(&info[0], PMIX_TIMEOUT, &timeout_s, PMIX_INT);
    PMIX_INFO_LOAD(&info[1], PMIX_COLLECT_DATA, &collect, PMIX_BOOL);
  }
  ~Pending() {
    PMIX_INFO_DESTRUCT(&info[0]);
    PMIX_INFO_DESTRUCT(&info[1]);
  }
  pmix_proc_t proc;
  pmix_info_t info[2];

  Mutex mu;
  CondVar cv;
  bool done GUARDED_BY(mu) = false;
  pmix_status_t status GUARDED_BY(mu) = PMIX_SUCCESS;
  std::string value GUARDED_BY(mu);
};

using PendingRef = std::shared_ptr<Pending>;

void Finish(void* cbdata, pmix_status_t status, const pmix_value_t* kv) {
  auto* ref = static_cast<PendingRef*>(cbdata);
  PendingRef p = *ref;
  delete ref;
  {
    MutexLock lock(&p->mu);
    p->status = status;
    if (status == PMIX_SUCCESS && kv != nullptr) {
      if (kv->type == PMIX_STRING && kv->data.string != nullptr) {
        p->value = kv->data.string;
      } else {
        p->status = PMIX_ERR_TYPE_MISMATCH;
      }
    }
    p->done = true;
  }
  p->cv.NotifyAll();
}

void OnFence(pmix_status_t status, void* cbdata) { Finish(cbdata, status, nullptr); }
void OnGet(pmix_status_t status, pmix_value_t* kv, void* cbdata) { Finish(cbdata, status, kv); }

class PmixExchange : public AddressExchange {
 public:
  explicit PmixExchange(const pmix_proc_t& me) : me_(me) {}
  ~PmixExchange() override {
    if (!abandoned_) PMIx_Finalize(nullptr, 0);
  }

  int rank() const override { return static_cast<int>(me_.rank); }

  StatusOr<std::string> Exchange(const std::string& address,
                                 std::chrono::milliseconds timeout) override {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    const int timeout_s = std::max(1, static_cast<int>(std::ceil(timeout.count() / 1000.0)));
    if (me_.rank == 0) {
      pmix_value_t v;
      PMIX_VALUE_CONSTRUCT(&v);
      v.type = PMIX_STRING;
      v.data.string = const_cast<char*>(address.c_str());
      pmix_status_t rc = PMIx_Put(PMIX_GLOBAL, kKey, &v);  // copies the value
      if (rc != PMIX_SUCCESS) return Internal(PmixError("PMIx_Put of rank 0's address", rc));
      rc = PMIx_Commit();
      if (rc != PMIX_SUCCESS) return Internal(PmixError("PMIx_Commit", rc));
    }
    pmix_proc_t everyone;
    PMIX_PROC_LOAD(&everyone, me_.nspace, PMIX_RANK_WILDCARD);
    auto fence = std::make_shared<Pending>(everyone, timeout_s, true);
    pmix_status_t rc =
        PMIx_Fence_nb(&fence->proc, 1, fence->info, 2, OnFence, new PendingRef(fence));
    if (rc != PMIX_SUCCESS) return Internal(PmixError("PMIx_Fence_nb", rc));
    HORA_RETURN_IF_ERROR(Wait(fence, deadline, timeout, "the fence of every rank"));
    if (me_.rank == 0) return address;

    pmix_proc_t root;
    PMIX_PROC_LOAD(&root, me_.nspace, 0);
    auto get = std::make_shared<Pending>(root, timeout_s, false);
    rc = PMIx_Get_nb(&get->proc, kKey, get->info, 1, OnGet, new PendingRef(get));
    if (rc != PMIX_SUCCESS) return Internal(PmixError("PMIx_Get_nb of rank 0's address", rc));
    HORA_RETURN_IF_ERROR(Wait(get, deadline, timeout, "rank 0's address"));
    MutexLock lock(&get->mu);
    return get->value;
  }

 private:
  Status Wait(const PendingRef& p, std::chrono::steady_clock::time_point deadline,
              std::chrono::milliseconds timeout, const char* what) {
    MutexLock lock(&p->mu);
    if (!p->cv.WaitUntil(&p->mu, deadline, [&p] {
          p->mu.AssertHeld();
          return p->done;
        })) {
      abandoned_ = true;
      char seconds[32];
      std::snprintf(seconds, sizeof(seconds), "%g", timeout.count() / 1000.0);
      return DeadlineExceeded(std::string("PMIx: waited ") + seconds +
                              " s (the start timeout) for " + what + " in namespace " + me_.nspace +
                              "; a rank did not start Hora");
    }
    if (p->status == PMIX_ERR_TIMEOUT) {
      return DeadlineExceeded("PMIx: timed out waiting for " + std::string(what) +
                              " in namespace " + me_.nspace + "; a rank did not start Hora");
    }
    if (p->status != PMIX_SUCCESS) {
      return Unavailable(std::string("PMIx: waiting for ") + what +
                         " failed: " + PMIx_Error_string(p->status));
    }
    return Status::Ok();
  }

  const pmix_proc_t me_;
  bool abandoned_ = false;  // an operation is still with PMIx: do not finalize under it
};

}  // namespace

StatusOr<std::unique_ptr<AddressExchange>> OpenPmixExchange() {
  pmix_proc_t me;
  PMIX_PROC_CONSTRUCT(&me);
  const pmix_status_t rc = PMIx_Init(&me, nullptr, 0);
  if (rc != PMIX_SUCCESS) {
    return Unavailable(
        PmixError("PMIx_Init (is this process started by mpirun or srun --mpi=pmix?)", rc));
  }
  return std::unique_ptr<AddressExchange>(new PmixExchange(me));
}

}  // namespace hora

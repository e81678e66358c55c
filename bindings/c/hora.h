/*
 * hora.h: the one public C API of Hora, a collective communication runtime for distributed
 * deep learning training. Frameworks include this header and link libhora.so; nothing else.
 *
 * Conventions
 * -----------
 * Errors.     Every function that can fail returns a hora_status_t. HORA_OK (0) is success.
 *             On failure, hora_last_error() returns a message for the calling thread naming
 *             what was wrong ("root 5 is out of range [0, 4)"); it stays valid until that
 *             thread's next Hora call. hora_error_string() names a status code.
 * Background  Failures that happen on the background thread (a rank died, the coordinator
 * errors.     was lost, a stall timeout fired) are sticky: every pending and every later
 *             operation fails with that same cause (HORA_ERR_PEER_FAILURE or HORA_ERR_ABORTED),
 *             and hora_async_error() reports it.
 * Ownership.  Input and output buffers belong to the caller and must stay valid and untouched
 *             until the operation's handle is done (hora_wait returned or hora_poll said done).
 *             Results whose size is known only after negotiation (allgather, alltoall,
 *             reducescatter) are held by the runtime until hora_release(); copy them out with
 *             hora_result_copy(). Every handle must be released exactly once; a released
 *             handle is invalid (HORA_ERR_NOT_FOUND) and never reused.
 * Names.      Every collective has a name, the same on every rank, that identifies it during
 *             negotiation (non-empty UTF-8, at most 4096 bytes: else INVALID_ARGUMENT); at
 *             most one operation per name is in flight on a rank at a time
 *             (HORA_ERR_ALREADY_EXISTS). Names may be reused once the previous one is done.
 * Collective. hora_init, hora_shutdown and every *_async enqueue are collective: all ranks
 *             of the operation's process set must make the same calls with the same names
 *             and matching arguments, but the enqueue order may differ between ranks. A
 *             mismatch (shape, dtype, op, root...) fails that operation on every rank with
 *             HORA_ERR_MISMATCH naming the field and the ranks; other operations go on.
 *             hora_process_set_add / _remove are collective over every rank of the job, in
 *             the same order on every rank (members and non-members alike).
 * Process     Every collective takes a process set id: HORA_GLOBAL_PROCESS_SET (0) is every
 * sets.       rank; others come from hora_process_set_add. Ranks given to an operation (root,
 *             peer, splits) are ranks within its set; names are unique per set. A rank that
 *             is not a member of the set gets HORA_ERR_INVALID_ARGUMENT. Sets run side by
 *             side: operations of different sets never wait for each other.
 * Point to    hora_send_async / hora_recv_async move one tensor between two ranks of a set:
 * point.      the n-th send from s to d with a tag matches d's n-th recv from s with that tag;
 *             dtype and element count must match (else HORA_ERR_MISMATCH on both).
 * Threads.    All functions are thread-safe, except that hora_init and hora_shutdown must not
 *             race with each other or with other calls. Enqueues never wait for other ranks
 *             (they write one ready notice to the coordinator before returning).
 * Blocking.   Only hora_init (bounded by the start timeout), hora_wait (bounded by its
 *             timeout argument and by the runtime's failure detection), hora_process_set_add
 *             / _remove (bounded by the start timeout), hora_start_timeline (a few round
 *             trips to the coordinator, each bounded by 2 s) and hora_shutdown block.
 * Env.        hora_init reads HORA_* environment variables (see README, "Options"); fields set
 *             in hora_config_t take precedence.
 */
#ifndef HORA_BINDINGS_C_HORA_H_
#define HORA_BINDINGS_C_HORA_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define HORA_API __attribute__((visibility("default")))

/* Status codes. Numbers are stable. */
typedef enum {
  HORA_OK = 0,
  HORA_ERR_INVALID_ARGUMENT = 1,
  HORA_ERR_FAILED_PRECONDITION = 2, /* not initialized, already initialized, shut down */
  HORA_ERR_ALREADY_EXISTS = 3,      /* an operation with this name is already in flight */
  HORA_ERR_NOT_FOUND = 4,           /* unknown or released handle, unknown process set */
  HORA_ERR_DEADLINE_EXCEEDED = 5,   /* a wait timed out (the operation may still complete) */
  HORA_ERR_MISMATCH = 6,            /* ranks submitted different signatures for this name */
  HORA_ERR_PEER_FAILURE = 7,        /* another rank or the coordinator failed */
  HORA_ERR_UNAUTHENTICATED = 8,
  HORA_ERR_UNAVAILABLE = 9, /* could not reach the coordinator */
  HORA_ERR_INTERNAL = 10,
  HORA_ERR_ABORTED = 11, /* shut down while pending, or the job aborted (a stall
                            timeout: "stall timeout: ..."); docs/errors.md */
  HORA_IN_PROGRESS = 12  /* never returned as an error; see hora_poll */
} hora_status_t;

/* Element types. Numbers are stable. */
typedef enum {
  HORA_UINT8 = 0,
  HORA_INT8 = 1,
  HORA_INT32 = 2,
  HORA_INT64 = 3,
  HORA_FLOAT16 = 4,
  HORA_BFLOAT16 = 5,
  HORA_FLOAT32 = 6,
  HORA_FLOAT64 = 7,
  HORA_BOOL = 8,
  HORA_INT16 = 9,
  HORA_UINT16 = 10
} hora_dtype_t;

typedef enum {
  HORA_SUM = 0,
  HORA_AVERAGE = 1,
  HORA_MIN = 2,
  HORA_MAX = 3,
  HORA_PRODUCT = 4
} hora_reduce_op_t;

typedef enum { HORA_DEVICE_CPU = 0, HORA_DEVICE_CUDA = 1 } hora_device_t;

/* The process set of every rank. */
#define HORA_GLOBAL_PROCESS_SET 0

/* An operation in flight. Positive; 0 is never a valid handle. */
typedef int64_t hora_handle_t;

/* A tensor as the framework holds it: contiguous, row-major. */
typedef struct {
  void* data;           /* may be NULL only when the tensor has 0 elements */
  const int64_t* shape; /* ndim entries, each >= 0; read during the call only */
  int32_t ndim;         /* 0 for a scalar */
  hora_dtype_t dtype;
  hora_device_t device;
  int32_t device_index;
  void* stream; /* CUDA: the framework's current cudaStream_t; CPU: NULL */
} hora_tensor_t;
/* CUDA tensors (docs/gpu.md, "NCCL backend"): the enqueue records an event on `stream`, and
 * Hora's own stream waits for it before reading the tensor, so work the framework queues on
 * `stream` after the enqueue is not waited for (and must not write the tensor before the
 * handle is done). A done handle means the device data is final. Without a usable GPU or a
 * backend that can serve CUDA tensors the enqueue fails on every rank, naming why. */

/* Init configuration. Zero / NULL fields mean "from the environment, else the default". */
typedef struct {
  size_t struct_size;              /* sizeof(hora_config_t): lets the struct grow */
  int32_t rank;                    /* -1: HORA_RANK (or OMPI_COMM_WORLD_RANK, RANK, ...) */
  int32_t size;                    /* -1: HORA_SIZE (or ...) */
  const char* coordinator_address; /* host:port; NULL: HORA_COORDINATOR_ADDR */
  const char* token;               /* NULL: HORA_JOB_TOKEN */
  int32_t deterministic;           /* 0: HORA_DETERMINISTIC; 1: on; -1: off */
} hora_config_t;

#define HORA_CONFIG_INITIALIZER \
  { sizeof(hora_config_t), -1, -1, NULL, NULL, 0 }

/* ---- Lifecycle (collective) ---- */

/* Starts the runtime: reads options, starts the coordinator in rank 0, joins, connects the
 * data plane, starts the background thread. config may be NULL. Blocks until every rank has
 * joined or the start timeout passes. */
HORA_API hora_status_t hora_init(const hora_config_t* config);

/* Stops the runtime. Pending operations fail with HORA_ERR_ABORTED; their handles stay valid
 * until released. Safe to call when not initialized (returns HORA_OK). */
HORA_API hora_status_t hora_shutdown(void);

HORA_API int hora_is_initialized(void);

/* ---- Topology (after init) ---- */
HORA_API hora_status_t hora_rank(int32_t* out);
HORA_API hora_status_t hora_size(int32_t* out);
HORA_API hora_status_t hora_local_rank(int32_t* out);
HORA_API hora_status_t hora_local_size(int32_t* out);
HORA_API hora_status_t hora_cross_rank(int32_t* out);
HORA_API hora_status_t hora_cross_size(int32_t* out);

/* ---- Collectives: enqueue, never wait for other ranks (collective) ---- */

/* output has input's shape and dtype; output == input.data is in place. prescale multiplies
 * each input before the reduction, postscale each result after (average = the sum divided
 * by the set's size; with a postscale other than 1, the sum times postscale / size). */
HORA_API hora_status_t hora_allreduce_async(const char* name, const hora_tensor_t* input,
                                            void* output, hora_reduce_op_t op, double prescale,
                                            double postscale, int32_t process_set,
                                            hora_handle_t* handle);

/* In place: root's tensor is copied into every rank's tensor. */
HORA_API hora_status_t hora_broadcast_async(const char* name, const hora_tensor_t* tensor,
                                            int32_t root, int32_t process_set,
                                            hora_handle_t* handle);

/* Concatenates every rank's tensor along the first dimension (which may differ per rank;
 * the other dimensions must match). Result: hora_result_*. */
HORA_API hora_status_t hora_allgather_async(const char* name, const hora_tensor_t* input,
                                            int32_t process_set, hora_handle_t* handle);

/* The same, with the caller's buffer for the result (CPU tensors): when the gathered result
 * has exactly output_bytes bytes it is written straight into `output` (no copy of the
 * runtime's; hora_result_copy into `output` then copies nothing); else it is held as by
 * hora_allgather_async. `output` must stay valid until the handle is done. NULL output:
 * INVALID_ARGUMENT. */
HORA_API hora_status_t hora_allgather_into_async(const char* name, const hora_tensor_t* input,
                                                 void* output, size_t output_bytes,
                                                 int32_t process_set, hora_handle_t* handle);

/* Reduces across ranks, then rank r keeps its part of the first dimension: size/first
 * rows each, the first (first_dim % size) ranks one more. Result: hora_result_*. */
HORA_API hora_status_t hora_reducescatter_async(const char* name, const hora_tensor_t* input,
                                                hora_reduce_op_t op, double prescale,
                                                double postscale, int32_t process_set,
                                                hora_handle_t* handle);

/* The same, with the caller's buffer for this rank's part (CPU tensors), as
 * hora_allgather_into_async: a part of exactly output_bytes bytes is written straight into
 * `output`; else it is held. NULL output: INVALID_ARGUMENT. */
HORA_API hora_status_t hora_reducescatter_into_async(const char* name, const hora_tensor_t* input,
                                                     void* output, size_t output_bytes,
                                                     hora_reduce_op_t op, double prescale,
                                                     double postscale, int32_t process_set,
                                                     hora_handle_t* handle);

/* Sends splits[r] rows of the first dimension to rank r (splits == NULL: equal parts; the
 * first dimension must then be divisible by size). nsplits must equal size. Result:
 * hora_result_* (received rows in rank order; hora_result_splits gives rows per sender). */
HORA_API hora_status_t hora_alltoall_async(const char* name, const hora_tensor_t* input,
                                           const int64_t* splits, int32_t nsplits,
                                           int32_t process_set, hora_handle_t* handle);

/* The same, with the caller's buffer for the received rows (CPU tensors), as
 * hora_allgather_into_async: a result of exactly output_bytes bytes is written straight into
 * `output`; else it is held. NULL output: INVALID_ARGUMENT. */
HORA_API hora_status_t hora_alltoall_into_async(const char* name, const hora_tensor_t* input,
                                                const int64_t* splits, int32_t nsplits,
                                                void* output, size_t output_bytes,
                                                int32_t process_set, hora_handle_t* handle);

/* Completes when every rank of the set has called it (the n-th barriers match). */
HORA_API hora_status_t hora_barrier_async(int32_t process_set, hora_handle_t* handle);

/* This rank has no more data: until every rank of the set has joined it contributes zeros to
 * the other ranks' allreduces in the set. Completes when all have joined;
 * hora_result_join_rank gives the last rank (a global rank) to join. */
HORA_API hora_status_t hora_join_async(int32_t process_set, hora_handle_t* handle);

/* Point-to-point within a process set (peer: a rank of the set, not this one; tag >= 0).
 * send reads tensor->data; recv writes the received elements into tensor->data. */
HORA_API hora_status_t hora_send_async(const hora_tensor_t* tensor, int32_t peer, int32_t tag,
                                       int32_t process_set, hora_handle_t* handle);
HORA_API hora_status_t hora_recv_async(const hora_tensor_t* tensor, int32_t peer, int32_t tag,
                                       int32_t process_set, hora_handle_t* handle);

/* This rank cannot make the operation `name` of `process_set` (a framework found its input
 * bad before enqueueing): the operation fails on every rank of the set with HORA_ERR_INVALID_
 * ARGUMENT and `message`, instead of the other ranks waiting for this one. Collective in the
 * same sense as the enqueue it replaces. The enqueue calls do this themselves for bad input
 * other than the name and the process set. */
HORA_API hora_status_t hora_refuse(const char* name, int32_t process_set, const char* message);

/* ---- Process sets ---- */

/* Collective over every rank of the job (see Conventions). ranks: nranks distinct global
 * ranks, any order. cpu_operations: the backend for the set's CPU tensors ("gloo",
 * "loopback", "auto", ...; NULL = HORA_CPU_OPERATIONS). *id receives the new set's id. A set
 * with the same ranks as an existing one is HORA_ERR_ALREADY_EXISTS; ranks or backends that
 * differ across ranks fail on every rank, naming them. */
HORA_API hora_status_t hora_process_set_add(const int32_t* ranks, int32_t nranks,
                                            const char* cpu_operations, int32_t* id);
/* Collective. Operations pending in the set fail with HORA_ERR_ABORTED. The global set
 * cannot be removed. */
HORA_API hora_status_t hora_process_set_remove(int32_t id);
/* This rank's rank in the set, or -1 when it is not a member. */
HORA_API hora_status_t hora_process_set_rank(int32_t id, int32_t* rank);
HORA_API hora_status_t hora_process_set_size(int32_t id, int32_t* size);
HORA_API hora_status_t hora_process_set_included(int32_t id, int* included);
/* The members (global ranks, sorted): *n receives their number; up to max are written. */
HORA_API hora_status_t hora_process_set_ranks(int32_t id, int32_t* ranks, int32_t max, int32_t* n);
/* The ids of every set that exists now, ascending; *n receives their number. */
HORA_API hora_status_t hora_process_set_ids(int32_t* ids, int32_t max, int32_t* n);
/* The steady path of set `id` on this rank (docs/design.md "Steady state"): *fast receives
 * the operations it ran without the coordinator, *slow the submissions of cached names that
 * went the normal way, *entries the names cached. All zero when the set has no steady path
 * (HORA_STEADY=off, a backend without a shared board, or not a member). Any pointer may be
 * NULL. */
HORA_API hora_status_t hora_steady_stats(int32_t id, int64_t* fast, int64_t* slow,
                                         int64_t* entries);
/* What this rank has sent to the coordinator (rank 0) since hora_init, heartbeats aside:
 * *messages receives the messages (announcements of ready tensors, joins, process-set
 * operations, failures), *notices the tensors announced in them. Operations on the steady
 * path add to neither. Any pointer may be NULL. */
HORA_API hora_status_t hora_control_stats(int64_t* messages, int64_t* notices);

/* ---- Handles ---- */

/* *done = 1 once the operation has finished (successfully or not), else 0. */
HORA_API hora_status_t hora_poll(hora_handle_t handle, int* done);

/* Waits until done or timeout_seconds pass (< 0: no limit of its own; the runtime's failure
 * detection still bounds it). Returns the operation's status; HORA_ERR_DEADLINE_EXCEEDED if
 * the timeout passed first (the handle stays valid). */
HORA_API hora_status_t hora_wait(hora_handle_t handle, double timeout_seconds);

/* Frees the handle and any result it holds. A pending operation is not cancelled (the
 * runtime keeps what it needs); its outcome is then discarded. */
HORA_API hora_status_t hora_release(hora_handle_t handle);

/* Result of a finished allgather / alltoall / reducescatter. For a CUDA input the result is
 * held in device memory of the input's device: allocate the output there (two phases: the
 * shape, then the copy) and hora_result_copy copies device to device (cudaMemcpy, finished
 * when it returns; dst may also be host memory). */
HORA_API hora_status_t hora_result_shape(hora_handle_t handle, int64_t* shape, int32_t max_ndim,
                                         int32_t* ndim);
HORA_API hora_status_t hora_result_copy(hora_handle_t handle, void* dst, size_t dst_bytes);
HORA_API hora_status_t hora_result_splits(hora_handle_t handle, int64_t* splits, int32_t n);
HORA_API hora_status_t hora_result_join_rank(hora_handle_t handle, int32_t* last_rank);

/* ---- Timeline ---- */

/* Starts writing this rank's timeline: Chrome trace events (open them in Perfetto) of every
 * operation's phases, under Horovod's event names, timestamped on the coordinator's clock so
 * that the ranks' files line up (docs/timeline.md). Rank 0 writes file_path itself (as
 * Horovod's rank 0 does); rank R > 0 writes file_path with ".rank<R>" inserted before a ".json"
 * ending (else appended); `hora-timeline merge` joins the ranks' files. mark_cycles != 0 adds
 * a CYCLE_START instant for each plan received and each steady round. Call it on every rank,
 * like a collective (each rank writes its own file); it does not wait for the others.
 * HORA_ERR_FAILED_PRECONDITION when a timeline is already on (HORA_TIMELINE starts one at
 * init, HORA_TIMELINE_MARK_CYCLES=1 with cycles); HORA_ERR_INVALID_ARGUMENT when the file
 * cannot be written. */
HORA_API hora_status_t hora_start_timeline(const char* file_path, int mark_cycles);
/* Writes what was recorded and closes the file. HORA_OK when no timeline is on. */
HORA_API hora_status_t hora_stop_timeline(void);

/* ---- Diagnosis (docs/failure-model.md "Diagnosis") ---- */

/* Asks rank 0's coordinator for a diagnosis of every rank now: what each is waiting for, its
 * last completed operation, its Python stacks. The report goes to rank 0's log (one message)
 * and is appended to the job's diagnosis file (HORA_DIAGNOSE_FILE). Returns at once; not
 * collective. HORA_ERR_FAILED_PRECONDITION when the diagnosis is off (HORA_DIAGNOSE_SECONDS=0). */
HORA_API hora_status_t hora_diagnose(void);
/* For a language runtime's hook (Python's hora package uses them): a thread that can read
 * the stacks of the process's threads waits in hora_diagnosis_wait, which returns HORA_OK
 * with *request > 0 when a diagnosis wants them, HORA_ERR_DEADLINE_EXCEEDED after
 * timeout_seconds (at most 3600) without one, HORA_ERR_FAILED_PRECONDITION once Hora is shut
 * down (the thread should end). The first call registers the hook: from then on a diagnosis
 * waits up to half of HORA_DIAGNOSE_SECONDS for the answer, and says the rank is wedged
 * outside the language when none comes. hora_diagnosis_answer gives it: `where`, the main
 * thread's innermost frames ("f (a.py:3) <- g (a.py:9)"), and `stacks`, every thread's stack
 * (UTF-8 text, copied; NULL means ""). A late answer is dropped. */
HORA_API hora_status_t hora_diagnosis_wait(double timeout_seconds, int64_t* request);
HORA_API hora_status_t hora_diagnosis_answer(int64_t request, const char* where,
                                             const char* stacks);

/* ---- Autotuning ---- */

/* The fusion threshold (bytes) and cycle time (ms) rank 0's coordinator plans with, as it last
 * told this rank. With HORA_AUTOTUNE=1 they change during the first steps while trials run
 * (*trial: the trial being measured) and stop changing once *done is 1 (*trial: the number of
 * trials); every rank is told the same values. Without autotuning: the configured values,
 * done = 1. Any pointer may be NULL. Thread-safe; not collective. */
HORA_API hora_status_t hora_autotune_state(int64_t* fusion_threshold_bytes, double* cycle_time_ms,
                                           int32_t* trial, int* done);

/* ---- Errors and build info ---- */
HORA_API const char* hora_error_string(hora_status_t status);
HORA_API const char* hora_last_error(void);
/* HORA_OK while the job is healthy; else the sticky background error, message in *message
 * (valid until hora_shutdown; may be NULL). */
HORA_API hora_status_t hora_async_error(const char** message);
HORA_API const char* hora_version(void);
/* 1 if the backend was compiled in ("gloo", "loopback", "mpi", "shm", "nccl", ...). */
HORA_API int hora_built(const char* backend);
/* The backends compiled in, comma-separated and sorted ("gloo,loopback"); static storage. */
HORA_API const char* hora_built_backends(void);
/* NCCL as this process loads it at run time ($HORA_NCCL_LIBRARY, else libnccl.so.2 on the
 * loader's path, else /usr/local/cuda/lib64; docs/gpu.md): its version code (22809 for
 * 2.28.9, what Horovod's nccl_built() returns), or 0 when this build has no NCCL backend or
 * the library cannot be loaded. *detail (may be NULL) receives the file it was loaded from,
 * or why not; static storage. Loads NCCL on the first call; needs no hora_init. */
HORA_API int hora_nccl_version(const char** detail);
/* One line on CUDA: the runtime's version, the driver's, and the device count or the error
 * cudaGetDeviceCount gave ("" when this build has no CUDA support); static storage until the
 * next call. hora_built("cuda") is 1 when this build has CUDA support. */
HORA_API const char* hora_cuda_info(void);

#ifdef __cplusplus
}
#endif

#endif /* HORA_BINDINGS_C_HORA_H_ */

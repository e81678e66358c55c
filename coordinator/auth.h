// The job token check that guards every coordinator RPC, and the TLS files' reading.
//
// Every RPC carries the job token in metadata kTokenMetadataKey. The service calls CheckToken at
// the top of each handler; a missing or different token is refused with UNAUTHENTICATED and
// logged with the peer's address and the method (never the token). The job goes on.
#ifndef HORA_COORDINATOR_AUTH_H_
#define HORA_COORDINATOR_AUTH_H_

#include <grpcpp/server_context.h>
#include <grpcpp/support/status.h>

#include <string>

#include "common/status.h"

namespace hora {

constexpr char kTokenMetadataKey[] = "hora-token";

// Compares in time independent of where the strings differ.
bool TokenEquals(const std::string& expected, const std::string& given);

// OK when `ctx` carries `token`; otherwise UNAUTHENTICATED (and a warning in the log).
grpc::Status CheckToken(const grpc::ServerContextBase& ctx, const std::string& token,
                        const char* method);

// Reads a PEM file of the job's TLS setup; `what` names it in the error ("certificate").
Status ReadTlsFile(const std::string& path, const char* what, std::string* out);

}  // namespace hora

#endif  // HORA_COORDINATOR_AUTH_H_

#include "coordinator/auth.h"

#include <fstream>
#include <sstream>

#include "common/logging.h"

namespace hora {

bool TokenEquals(const std::string& expected, const std::string& given) {
  unsigned char diff = expected.size() == given.size() ? 0 : 1;
  for (size_t i = 0; i < given.size(); ++i) {
    const unsigned char e = expected.empty() ? 0 : expected[i % expected.size()];
    diff |= static_cast<unsigned char>(e ^ static_cast<unsigned char>(given[i]));
  }
  return diff == 0 && !expected.empty();
}

grpc::Status CheckToken(const grpc::ServerContextBase& ctx, const std::string& token,
                        const char* method) {
  const auto& metadata = ctx.client_metadata();
  auto it = metadata.find(kTokenMetadataKey);
  if (it != metadata.end() &&
      TokenEquals(token, std::string(it->second.data(), it->second.size()))) {
    return grpc::Status::OK;
  }
  const char* why = it == metadata.end() ? "no job token" : "a wrong job token";
  HORA_LOG_WARN("coordinator: refused {} from {}: {}", method, ctx.peer(), why);
  return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                      std::string("the coordinator refused the call: ") + why);
}

Status ReadTlsFile(const std::string& path, const char* what, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return InvalidArgument(std::string("cannot read the TLS ") + what + " '" + path + "'");
  std::ostringstream ss;
  ss << in.rdbuf();
  *out = ss.str();
  return Status::Ok();
}

}  // namespace hora

#include "runtime/bootstrap/address_exchange.h"

#include "runtime/bootstrap/pmix/pmix_exchange.h"

namespace hora {

StatusOr<std::unique_ptr<AddressExchange>> OpenAddressExchange(const std::string& kind) {
  if (kind == "pmix") return OpenPmixExchange();
  return InvalidArgument("no address exchange '" + kind + "' (known: pmix)");
}

}  // namespace hora

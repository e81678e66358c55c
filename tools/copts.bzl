"""Compiler options shared by Hora's BUILD files."""

# -O3 for the libraries with hot loops (reduce functions, copies, the shared-memory and Gloo
# data planes). The sanitizer builds keep their -O1: -O3 with AddressSanitizer and UBSan
# doubled those files' compile time.
HOT_LOOP_COPTS = select({
    "//tools:sanitized": [],
    "//conditions:default": ["-O3"],
})

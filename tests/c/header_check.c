/* Reads a file and reports what cl-headers/clshim.h makes of it: "clshim binary vN,
 * fingerprint F, kind K, options "O", source N bytes" and the text, or "not a clshim
 * binary". Exit 0 either way; 2 if the file cannot be read. */
#include "../../cl-headers/clshim.h"
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    FILE *f = fopen(argv[1], "rb");
    if (!f) return 2;
    static unsigned char buf[1 << 20];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    clshim_binary b;
    if (clshim_binary_parse(buf, n, &b)) {
        printf("clshim binary v%u, fingerprint %016llx, kind %u, options \"%.*s\", headers %u, "
               "inputs %u, source %zu bytes\n%.*s",
               b.version, (unsigned long long)b.fingerprint, b.kind, (int)b.options_length,
               b.options ? b.options : "", b.num_headers, b.num_inputs, b.source_length,
               (int)b.source_length, b.source ? b.source : "");
    } else {
        printf("not a clshim binary\n");
    }
    return 0;
}

/* stb_image.c — stb_image (Debian libstb-dev's header) compiled into the fuzz build, so
 * the image decoders carry coverage and sanitizer instrumentation; the fuzzers use it in
 * place of the prebuilt libstb. */
#define STB_IMAGE_IMPLEMENTATION
#include <stb/stb_image.h>

/* SPDX-License-Identifier: Apache-2.0
 * te/deprecated.h -- how libte's public headers mark a former name kept for
 * one release.
 *
 * TE_DEPRECATED("use x") puts the compiler's deprecation attribute on a
 * declaration (GCC, Clang; nothing elsewhere), so a caller still using the
 * old name is told the new one at build time; the library also logs one
 * WARN line the first time an old name is called.
 *
 * TE_DEPRECATED_NAMES_VISIBLE says whether the old function names are
 * declared.  Several were the names of the structs they fill
 * (tecore_device_props() filled struct tecore_device_props); in C++ such a
 * function hides its struct, so every use needed the `struct` keyword.  C
 * keeps the old declarations (tags and functions live apart there); C++
 * sees them only when TE_DEPRECATED_NAMES is defined before the include,
 * so by default `tecore_device_props p;` just works.  The symbols stay
 * exported either way, so built programs keep running. */
#ifndef TE_DEPRECATED_H
#define TE_DEPRECATED_H

#if defined(__GNUC__) || defined(__clang__)
#define TE_DEPRECATED(msg) __attribute__((deprecated(msg)))
#else
#define TE_DEPRECATED(msg)
#endif

#if !defined(__cplusplus) || defined(TE_DEPRECATED_NAMES)
#define TE_DEPRECATED_NAMES_VISIBLE 1
#else
#define TE_DEPRECATED_NAMES_VISIBLE 0
#endif

#endif

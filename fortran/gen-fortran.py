#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""gen-fortran.py -- writes libte's Fortran modules from its C headers.

    fortran/gen-fortran.py [--srcdir DIR] [--outdir DIR] [--cc CC] [--symbols]

reads libtecore/te/*.h, libtegraph/te/*.h and libtecomm/te/*.h through the
C preprocessor and writes

    fortran/te_core.f90  fortran/te_graph.f90  fortran/te_comm.f90
        one module a library: the enums and integer #defines as named
        integer(c_int) parameters, every public struct as a bind(C) derived
        type, every public function as an iso_c_binding interface, and
        small module procedures where C strings cross (character(len=*) in,
        allocatable character out);
    t/fortran/fortran_layout_c.c  t/fortran/fortran_layout_f.f90
        two programs that print sizeof/offsetof of every struct and field,
        one from C, one from the Fortran types: t/fortran/fortran-layout.sh diffs
        them, so a type whose layout drifts from its struct fails make check.

--symbols writes nothing and prints the names gfortran gives what the
modules define (module procedures, the types' helpers): the names that
fortran/libtefortran.map exports (t/fortran/fortran-map.sh compares them).

The output is committed (building needs no Python); t/fortran/fortran-gen.sh runs
this script again in make check and fails when the committed files differ,
so a header change that is not regenerated is caught.  Why a generator and
not hand-written bindings: 250 functions and 40 structs would drift.

What cannot be read from a C prototype is said here, in ARRAY_PARAMS: which
pointer parameters are arrays (a C `struct tecore_tensor *` is one tensor
or a run of them; only the documentation says which).  A name listed there
that no header has is an error, so a rename is noticed.  Needing no entry:
`const T *` of a number, and a pointer followed by its count (COUNT_NAMES).
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

LIBS = [
    # module, library folder, its headers' prefix, modules it uses
    ("te_core", "libtecore", "tecore", []),
    ("te_graph", "libtegraph", "tegraph", ["te_core"]),
    ("te_comm", "libtecomm", "tecomm", ["te_core"]),
]

# Pointer parameters that point at arrays (the others point at one value).
# `const T *` of a number is always an array and needs no entry.
ARRAY_PARAMS = {
    "tecore_tensor_to_dlpack": {"shape", "strides"},
    "tecore_graph_nodes": {"nodes"},
    "tecore_quantize_multi": {"in", "out"},
    "tecore_adam_step": {"tensors"},
    "tecore_sgd_step": {"tensors"},
    "tecore_l2norm_multi_workspace_size": {"tensors"},
    "tecore_l2norm_multi": {"tensors"},
    "tecore_unscale_multi": {"in", "out"},
    "tecore_seq_groups": {"groups"},
    "tecore_seq_params": {"params"},
    "tecore_seq_get_saved": {"saved"},
    "tecore_svc_job_create": {"ops"},
    "tegraph_graph_kernel_nodes": {"nodes"},
    "tegraph_callables_create": {"descs", "order", "out"},
    "tegraph_callable_forward": {"inputs", "kw", "outputs"},
    "tegraph_callable_backward": {"grad_outputs", "grad_inputs"},
}

# A pointer parameter followed by an integer of one of these names is an
# array of that many elements (tecore_cvt_f32_to_bf16(in, out, n)).
COUNT_NAMES = {"n", "count", "max", "nelems"}

# Variadic functions: Fortran cannot call `...`, so each is reached through
# a fixed-argument C function of fortran/te_fortran.c that passes the
# message on as "%s".  Value: that function's name.
VARIADIC = {
    "tecore_set_error": "tefortran_set_error",
    "tecore_log": "tefortran_log",
}

# #defines that are not constants of the API (the version is configure's).
SKIP_MACROS = re.compile(r"^TECORE_VERSION_")

INT_KINDS = {
    "int": "c_int", "unsigned": "c_int", "unsigned int": "c_int",
    "int32_t": "c_int32_t", "uint32_t": "c_int32_t",
    "int64_t": "c_int64_t", "uint64_t": "c_int64_t",
    "int16_t": "c_int16_t", "uint16_t": "c_int16_t",
    "int8_t": "c_int8_t", "uint8_t": "c_int8_t",
    "unsigned char": "c_int8_t", "signed char": "c_int8_t",
    "size_t": "c_size_t", "long": "c_long", "unsigned long": "c_long",
}
REAL_KINDS = {"float": "c_float", "double": "c_double"}


def die(msg):
    sys.stderr.write("gen-fortran: %s\n" % msg)
    sys.exit(1)


# ---- reading the headers ---------------------------------------------------

def preprocess(srcdir, cc):
    """The preprocessed text of all three umbrella headers, as a list of
    (header path relative to srcdir or None, text) runs."""
    tmp = tempfile.mkdtemp(prefix="gen-fortran.")
    os.makedirs(os.path.join(tmp, "te"))
    # te/version.h is configure's output; the bindings do not need its values
    with open(os.path.join(tmp, "te", "version.h"), "w") as f:
        f.write("#define TECORE_VERSION_MAJOR 0\n")
    src = os.path.join(tmp, "all.c")
    with open(src, "w") as f:
        f.write("#include <te/core.h>\n#include <te/graph.h>\n"
                "#include <te/offload.h>\n#include <te/comm.h>\n")
    cmd = cc.split() + ["-E", "-I" + tmp]
    for _, lib, _, _ in LIBS:
        cmd.append("-I" + os.path.join(srcdir, lib))
    cmd.append(src)
    out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE,
                         universal_newlines=True).stdout
    for p in (os.path.join(tmp, "te", "version.h"), src):
        os.unlink(p)
    os.rmdir(os.path.join(tmp, "te"))
    os.rmdir(tmp)
    runs, cur, buf = [], None, []
    for line in out.split("\n"):
        m = re.match(r'^# \d+ "([^"]*)"', line)
        if m:
            if buf:
                runs.append((cur, "\n".join(buf)))
                buf = []
            path = os.path.relpath(m.group(1), srcdir) if not m.group(1).startswith("<") else ""
            cur = path if re.match(r"^lib\w+/te/\w+\.h$", path) else None
            continue
        if cur:
            buf.append(line)
    if buf:
        runs.append((cur, "\n".join(buf)))
    return runs


def split_top(text, sep):
    """Splits text at sep outside (), [] and {}."""
    parts, depth, cur = [], 0, []
    for c in text:
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        if c == sep and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(c)
    parts.append("".join(cur))
    return parts


def statements(runs):
    """Top-level declarations, each (header, text, deprecated)."""
    out = []
    for hdr, text in runs:
        for st in split_top(text, ";"):
            st = " ".join(st.split())
            if not st:
                continue
            dep = "deprecated" in st
            st = re.sub(r"__attribute__\s*\(\((?:[^()]|\([^()]*\))*\)\)", "", st).strip()
            st = re.sub(r"^extern \"C\" \{ ?|^\} ?", "", st).strip()
            if st.startswith("}"):
                st = st[1:].strip()
            if st:
                out.append((hdr, st, dep))
    return out


class Decl:
    """One declarator: base type words, pointer depth, const-ness of the
    pointee, array dimensions, name; or a function pointer."""

    def __init__(self, base, stars, const_target, dims, name, funptr=False,
                 ptr_to_array=None, inner_const=False):
        self.base, self.stars, self.const_target = base, stars, const_target
        self.inner_const = inner_const  # `T *const *`: an array of pointers in
        self.dims, self.name, self.funptr = dims, name, funptr
        self.ptr_to_array = ptr_to_array


def parse_decl(text, inherit=None):
    text = text.strip()
    m = re.match(r"^(.*?)\(\s*\*\s*(\w+)\s*\)\s*\(.*\)$", text)
    if m:
        return Decl(m.group(1), 1, False, [], m.group(2), funptr=True)
    m = re.match(r"^(.*?)\(\s*\*\s*(\w+)\s*\)\s*\[(\w+)\]$", text)
    if m:
        return Decl(m.group(1).strip(), 1, "const" in m.group(1).split(), [],
                    m.group(2), ptr_to_array=m.group(3))
    dims = re.findall(r"\[\s*(\w*)\s*\]", text)
    text = re.sub(r"\[.*$", "", text).strip()
    m = re.match(r"^(.*?)(\w+)$", text)
    if not m:
        die("cannot read declarator %r" % text)
    head, name = m.group(1), m.group(2)
    if inherit is not None:
        base_words, const_target = inherit
        stars = head.count("*")
        return Decl(base_words, stars, const_target if stars else False, dims, name,
                    inner_const="const" in head)
    first_star = head.find("*")
    before = head if first_star < 0 else head[:first_star]
    stars = head.count("*")
    words = [w for w in re.findall(r"\w+", before)]
    const_target = "const" in words
    inner_const = first_star >= 0 and "const" in head[first_star:]
    words = [w for w in words if w not in ("const", "volatile", "restrict")]
    return Decl(" ".join(words), stars, const_target, dims, name, inner_const=inner_const)


def parse_fields(body):
    fields = []
    for st in split_top(body, ";"):
        st = " ".join(st.split())
        if not st:
            continue
        parts = split_top(st, ",")
        first = parse_decl(parts[0])
        fields.append(first)
        for p in parts[1:]:
            fields.append(parse_decl(p, inherit=(first.base, first.const_target)))
    return fields


def eval_int(expr, known):
    e = expr.strip()
    e = re.sub(r"/\*.*?\*/", "", e).strip()
    e = re.sub(r"\b(0x[0-9a-fA-F]+|\d+)[uUlL]+\b", r"\1", e)
    for k, v in known.items():
        e = re.sub(r"\b%s\b" % k, "(%d)" % v, e)
    if not re.match(r"^[\s\d()xXa-fA-F+\-*|&<>~]*$", e) or e == "":
        return None
    try:
        return int(eval(e, {"__builtins__": {}}, {}))
    except Exception:
        return None


class Api:
    def __init__(self):
        self.enums = []        # (header, [(name, value)])
        self.enum_types = set()
        self.int_types = {}    # typedef name -> kind
        self.ptr_types = set() # typedefs that are (opaque) pointers
        self.opaque = set()    # typedef'd incomplete structs (used via pointer)
        self.fn_types = set()
        self.structs = []      # (header, name, [Decl])
        self.struct_names = set()
        self.funcs = []        # (header, ret Decl, [Decl], variadic, deprecated)
        self.macros = []       # (header, name, value)


def read_api(srcdir, cc):
    api = Api()
    runs = preprocess(srcdir, cc)
    for hdr, st, dep in statements(runs):
        typedef = st.startswith("typedef ")
        body_m = re.search(r"\{(.*)\}", st)
        if body_m and re.match(r"^(typedef )?enum\b", st):
            names, val, known = [], -1, {}
            for item in split_top(body_m.group(1), ","):
                item = item.strip()
                if not item:
                    continue
                if "=" in item:
                    n, e = item.split("=", 1)
                    n = n.strip()
                    v = eval_int(e, known)
                    if v is None:
                        die("enum value %r of %s" % (e, n))
                    val = v
                else:
                    n, val = item, val + 1
                known[n] = val
                names.append((n, val))
            api.enums.append((hdr, names))
            if typedef:
                api.enum_types.add(st[body_m.end():].strip())
            continue
        if body_m and re.match(r"^(typedef )?struct\b", st):
            if typedef:
                name = st[body_m.end():].strip()
            else:
                name = re.match(r"^struct (\w+)", st).group(1)
            api.structs.append((hdr, name, parse_fields(body_m.group(1))))
            api.struct_names.add(name)
            continue
        if typedef:
            rest = st[len("typedef "):]
            m = re.match(r"^(enum|struct) (\w+) (\*?)\s*(\w+)$", rest)
            if m:
                if m.group(1) == "enum":
                    api.enum_types.add(m.group(4))
                elif m.group(3):
                    api.ptr_types.add(m.group(4))
                else:
                    api.opaque.add(m.group(4))
                continue
            if re.search(r"\(\s*\*\s*\w+\s*\)\s*\(", rest):
                api.fn_types.add(re.search(r"\(\s*\*\s*(\w+)", rest).group(1))
                continue
            m = re.match(r"^([\w ]+?) (\w+)$", rest)
            if m and m.group(1) in INT_KINDS:
                api.int_types[m.group(2)] = INT_KINDS[m.group(1)]
                continue
            continue  # system typedefs and the like
        m = re.match(r"^(.*?)\b((?:tecore|tegraph|tecomm|tefortran)_\w+)\s*\((.*)\)$", st)
        if m and "(" not in m.group(1):
            ret = parse_decl(m.group(1) + " " + m.group(2))
            params = []
            variadic = False
            args = m.group(3).strip()
            if args != "void":
                for p in split_top(args, ","):
                    p = p.strip()
                    if p == "...":
                        variadic = True
                        continue
                    params.append(parse_decl(p))
            api.funcs.append((hdr, ret, params, variadic, dep))
    # integer #defines, read from the header text
    for _, lib, prefix, _ in LIBS:
        d = os.path.join(srcdir, lib, "te")
        known = {}
        for h in sorted(os.listdir(d)):
            if not h.endswith(".h"):
                continue
            for line in open(os.path.join(d, h)):
                m = re.match(r"^#define ((?:TECORE|TEGRAPH|TECOMM)_\w+)\s+(.+)$", line)
                if not m or m.group(1).endswith("_") or SKIP_MACROS.match(m.group(1)):
                    continue
                v = eval_int(re.sub(r"/\*.*", "", m.group(2)), dict(api_known(api), **known))
                if v is None:
                    continue
                known[m.group(1)] = v
                api.macros.append(("%s/te/%s" % (lib, h), m.group(1), v))
    return api


def api_known(api):
    return {n: v for _, n, v in api.macros}


# ---- writing Fortran -------------------------------------------------------

class Writer:
    def __init__(self, wrap=True):
        self.lines = []
        self.wrap = wrap

    def __call__(self, text=""):
        if "\n" in text:
            for line in text.rstrip("\n").split("\n"):
                self(line)
            return
        if not self.wrap or text.lstrip().startswith(("!", "/*", " *")):
            self.lines.append(text)
            return
        # free form: lines of at most 132 characters; continue with &
        indent = len(text) - len(text.lstrip())
        while len(text) > 100:
            cut = text.rfind(", ", 0, 98)
            if cut < 0:
                cut = text.rfind(" ", 0, 98)
            if cut <= indent:
                break
            self.lines.append(text[:cut + 1].rstrip() + " &")
            text = " " * (indent + 4) + "& " + text[cut + 1:].lstrip()
        self.lines.append(text)

    def text(self):
        return "\n".join(self.lines) + "\n"


def ftype(api, base, where):
    """The Fortran type of a C value of type base (no pointer)."""
    if base in INT_KINDS:
        return "integer(%s)" % INT_KINDS[base]
    if base in REAL_KINDS:
        return "real(%s)" % REAL_KINDS[base]
    if base in api.enum_types or base.startswith("enum "):
        return "integer(c_int)"
    if base in api.int_types:
        return "integer(%s)" % base
    if base in api.ptr_types:
        return "type(c_ptr)"
    if base in api.fn_types:
        return "type(c_funptr)"
    s = base[len("struct "):] if base.startswith("struct ") else base
    if s in api.struct_names:
        return "type(%s)" % s
    die("no Fortran type for C type %r (%s)" % (base, where))


def is_char(d):
    return d.base == "char"


def field_line(api, sname, f):
    where = "%s.%s" % (sname, f.name)
    if f.funptr:
        t = "type(c_funptr)"
    elif f.stars:
        t = "type(c_ptr)"
    elif is_char(f):
        t = "character(kind=c_char)"
    else:
        t = ftype(api, f.base, where)
    dims = ""
    if f.dims:
        vals = []
        for dim in reversed(f.dims):  # C row-major -> Fortran column-major
            v = eval_int(dim, api_known(api))
            if v is None:
                die("array size %r of %s" % (dim, where))
            vals.append(str(v))
        dims = "(" + ",".join(vals) + ")"
    return "    %s :: %s%s%s" % (t, f.name, dims, default_init(t))


def default_init(t):
    """Every component zero (a null pointer, a NUL character): a declared
    variable is a zeroed C struct, and the structure constructor
    tecore_x() with no argument compiles.  A nested struct's components
    have their own."""
    for prefix, init in (("type(c_ptr)", "c_null_ptr"), ("type(c_funptr)", "c_null_funptr"),
                         ("integer(", "0"), ("real(", "0"), ("character(", "c_null_char"),
                         ("logical(", ".false.")):
        if t.startswith(prefix):
            return " = " + init
    return ""


class Param:
    """How one C parameter is declared in the raw interface and in the
    wrapper (when the function has one)."""

    def __init__(self, decl, raw, wrap=None, call=None, pre=None, post=None, drop=False):
        self.decl, self.raw = decl, raw
        self.wrap = wrap          # wrapper declaration, or None: same as raw
        self.call = call          # expression the wrapper passes, or None: the name
        self.pre = pre or []      # wrapper statements before the call
        self.post = post or []    # wrapper statements after the call
        self.drop = drop          # not a wrapper argument at all


def map_param(api, fname, d, params):
    n = d.name
    where = "%s(%s)" % (fname, n)
    arrays = set(ARRAY_PARAMS.get(fname, set()))
    # a pointer followed by its element count (T *out, size_t n) is an array
    i = params.index(d)
    if i + 1 < len(params):
        nxt = params[i + 1]
        if nxt.stars == 0 and nxt.base in INT_KINDS and nxt.name in COUNT_NAMES:
            arrays.add(n)
    if d.funptr:
        return Param(d, "type(c_funptr), value :: %s" % n)
    if d.ptr_to_array:
        if not is_char(d):
            die("pointer to array of non-char in %s" % where)
        return Param(d, "character(kind=c_char) :: %s(%s,*)" % (n, d.ptr_to_array))
    if d.stars == 0:
        if d.dims:
            die("array parameter in %s" % where)
        return Param(d, "%s, value :: %s" % (ftype(api, d.base, where), n))
    opaque = d.base in api.opaque or d.base == "void"
    if is_char(d) and d.stars == 1:
        if d.const_target:   # a C string in
            return Param(d, "type(c_ptr), value :: %s" % n,
                         wrap="character(len=*), intent(in), optional :: %s" % n,
                         call="tecore_f_cloc(%s_z)" % n,
                         pre=["call tecore_f_cstring(%s, %s_z)" % (n, n)])
        return Param(d, "character(kind=c_char) :: %s(*)" % n)  # a buffer out
    if is_char(d) and d.stars == 2:
        if n in arrays or d.inner_const:
            return Param(d, "type(c_ptr), intent(in) :: %s(*)" % n)
        # const char **: a static string out
        return Param(d, "type(c_ptr) :: %s" % n,
                     wrap="character(len=:), allocatable, intent(out) :: %s" % n,
                     call="%s_p" % n,
                     post=["%s = tecore_f_string(%s_p)" % (n, n)])
    if d.stars == 2:
        if n in arrays or d.inner_const:  # void *const *args: an array of pointers
            if n in arrays and not d.const_target:
                return Param(d, "type(c_ptr) :: %s(*)" % n)
            return Param(d, "type(c_ptr), intent(in) :: %s(*)" % n)
        return Param(d, "type(c_ptr) :: %s" % n)  # a handle out
    if d.stars != 1:
        die("%d-level pointer in %s" % (d.stars, where))
    if opaque:
        return Param(d, "type(c_ptr), value :: %s" % n)
    t = ftype(api, d.base, where)
    # optional: an absent argument is passed as NULL (Fortran 2018, and
    # gfortran since 4.9), for the pointers C lets the caller leave out
    intent = (", intent(in)" if d.const_target else "") + ", optional"
    if n in arrays or (d.const_target and not t.startswith("type(")):
        return Param(d, "%s%s :: %s(*)" % (t, intent, n))
    return Param(d, "%s%s :: %s" % (t, intent, n))


def ret_type(api, fname, ret):
    if ret.stars == 1 and is_char(ret):
        return "type(c_ptr)", True
    if ret.stars:
        die("pointer return in %s" % fname)
    if ret.base == "void":
        return None, False
    return ftype(api, ret.base, fname + " return"), False


def fortran_names_check(names, what):
    seen = {}
    for n in names:
        k = n.lower()
        if k in seen and seen[k] != n:
            die("%s: %s and %s are one name in Fortran" % (what, seen[k], n))
        if k in seen:
            die("%s: %s twice" % (what, n))
        seen[k] = n
        if len(n) > 63:
            die("%s: %s is longer than Fortran's 63 characters" % (what, n))


def gen_module(api, mod, lib, prefix, uses, syms=None):
    """The module's text; syms (a list), when given, gets the names of
    what the module defines in the library: its types and its procedures
    (the bind(C) interfaces define nothing, the C library does)."""
    hdrs = lambda h: h is not None and h.startswith(lib + "/")
    w = Writer()
    w("! SPDX-License-Identifier: Apache-2.0")
    w("! %s.f90 -- the Fortran module of %s: its enums and constants as named" % (mod, lib))
    w("! integer parameters, its structs as bind(C) types, its functions as")
    w("! iso_c_binding interfaces (C strings as character(len=*)).  See te_fortran(7).")
    w("! GENERATED by fortran/gen-fortran.py from %s/te/*.h: do not edit;" % lib)
    w("! run fortran/gen-fortran.py after changing a header.")
    w("module %s" % mod)
    w("  use, intrinsic :: iso_c_binding")
    for u in uses:
        w("  use %s" % u)
    w("  implicit none")
    w()
    names = []
    # integer typedefs (tecore_devptr_t ...) become kind parameters
    kinds = [(n, k) for n, k in sorted(api.int_types.items()) if n.startswith(prefix + "_")]
    if kinds:
        w("  ! C integer typedefs, as kinds: integer(tecore_devptr_t) :: p")
        for n, k in kinds:
            w("  integer, parameter :: %s = %s" % (n, k))
            names.append(n)
        w()
    # enums and #defines
    consts = []
    for hdr, items in api.enums:
        if hdrs(hdr):
            consts += [(hdr, n, v) for n, v in items if not n.endswith("_")]
    consts += [(h, n, v) for h, n, v in api.macros if hdrs(h)]
    # C tells TECORE_SEQ_FORWARD from tecore_seq_forward(), Fortran does not:
    # such a constant takes the suffix _VALUE
    func_lc = {r.name.lower() for _, r, _, _, _ in api.funcs}
    consts = [(h, n + "_VALUE" if n.lower() in func_lc else n, v) for h, n, v in consts]
    cur = None
    for hdr, n, v in consts:
        if hdr != cur:
            w("  ! from %s" % hdr)
            cur = hdr
        kind = "c_int" if -2**31 <= v < 2**31 else "c_int64_t"
        if kind == "c_int" and v >= 2**31:
            v -= 2**32
        w("  integer(%s), parameter :: %s = %d" % (kind, n, v))
        names.append(n)
    w()
    # structs
    for hdr, sname, fields in api.structs:
        if not hdrs(hdr):
            continue
        w("  ! struct %s (%s)" % (sname, hdr))
        w("  type, bind(C) :: %s" % sname)
        for f in fields:
            w(field_line(api, sname, f))
        fortran_names_check([f.name for f in fields], "struct " + sname)
        w("  end type %s" % sname)
        w()
        names.append(sname)
    # functions
    raw, wrappers = [], []
    struct_lc = {s.lower() for s in api.struct_names}
    for hdr, ret, params, variadic, dep in api.funcs:
        if not hdrs(hdr):
            continue
        fname = ret.name
        if dep:
            continue  # former names: Fortran code starts with the new ones
        if fname.lower() in struct_lc:
            # Fortran has one name space for types and procedures
            die("%s() has the name of a struct: rename the function (the old name "
                "TE_DEPRECATED, as te/deprecated.h says)" % fname)
        if variadic:
            if fname not in VARIADIC:
                die("%s is variadic: add it to VARIADIC and fortran/te_fortran.c" % fname)
            params = params[:-1] + [Decl("char", 1, True, [], "msg")]
        ps = [map_param(api, fname, p, params) for p in params]
        fortran_names_check([p.name for p in params] + [fname], fname)
        rt, ret_str = ret_type(api, fname, ret)
        needs_wrap = ret_str or variadic or any(p.wrap for p in ps)
        cname = VARIADIC.get(fname, fname)
        # char *buf, size_t len [, size_t *needed]: a string out
        buf_at = None
        for i, p in enumerate(params):
            if is_char(p) and p.stars == 1 and not p.const_target and i + 1 < len(params) \
               and params[i + 1].base == "size_t" and params[i + 1].stars == 0:
                buf_at = i
                needs_wrap = True
        rawname = fname + "_c" if needs_wrap else fname
        raw.append((rawname, cname, ps, rt, fname))
        if needs_wrap:
            wrappers.append((fname, rawname, ps, rt, ret_str, buf_at))
        names.append(fname)
        if needs_wrap:
            names.append(rawname)
    helpers = re.findall(r"^  (?:function|subroutine) (\w+)", HELPERS, re.M) \
        if mod == "te_core" else []
    names += helpers
    fortran_names_check(names, "module " + mod)
    if syms is not None:
        syms += [("type", mod, sname) for hdr, sname, _ in api.structs if hdrs(hdr)]
        syms += [("proc", mod, n) for n in helpers + [wr[0] for wr in wrappers]]
    if raw:
        w("  interface")
        for rawname, cname, ps, rt, fname in raw:
            args = ", ".join(p.decl.name for p in ps)
            kw = "function" if rt else "subroutine"
            w("    %s %s(%s) bind(C, name=\"%s\")" % (kw, rawname, args, cname))
            w("      import")
            w("      implicit none")
            for p in ps:
                w("      " + p.raw)
            if rt:
                w("      %s :: %s" % (rt, rawname))
            w("    end %s %s" % (kw, rawname))
        w("  end interface")
        w()
    w("contains")
    w()
    if mod == "te_core":
        w(HELPERS)
    for fname, rawname, ps, rt, ret_str, buf_at in wrappers:
        gen_wrapper(w, fname, rawname, ps, rt, ret_str, buf_at)
    w("end module %s" % mod)
    return w.text()


HELPERS = """\
  ! A C string (NUL-terminated, owned by the library) as a Fortran string;
  ! "" for a null pointer.
  function tecore_f_string(p) result(s)
    type(c_ptr), intent(in) :: p
    character(len=:), allocatable :: s
    interface
      function strlen(q) bind(C, name="strlen")
        import :: c_ptr, c_size_t
        type(c_ptr), value :: q
        integer(c_size_t) :: strlen
      end function strlen
    end interface
    character(kind=c_char), pointer :: c(:)
    integer :: i, n
    if (.not. c_associated(p)) then
      s = ""
      return
    end if
    n = int(strlen(p))
    call c_f_pointer(p, c, [n])
    allocate(character(len=n) :: s)
    do i = 1, n
      s(i:i) = c(i)
    end do
  end function tecore_f_string

  ! A Fortran string as a NUL-terminated C string in z; s absent: z is
  ! left unallocated and passed on as NULL.
  subroutine tecore_f_cstring(s, z)
    character(len=*), intent(in), optional :: s
    character(kind=c_char), allocatable, intent(out) :: z(:)
    integer :: i
    if (.not. present(s)) return
    allocate(z(len(s) + 1))
    do i = 1, len(s)
      z(i) = s(i:i)
    end do
    z(len(s) + 1) = c_null_char
  end subroutine tecore_f_cstring

  function tecore_f_cloc(z) result(p)
    character(kind=c_char), allocatable, target, intent(in) :: z(:)
    type(c_ptr) :: p
    p = c_null_ptr
    if (allocated(z)) p = c_loc(z)
  end function tecore_f_cloc

  ! A host address as the device address that libtecore's copies take (the
  ! backends use unified addressing): tecore_memcpy(d, tecore_f_devptr(c_loc(x)), n)
  function tecore_f_devptr(p) result(d)
    type(c_ptr), intent(in) :: p
    integer(tecore_devptr_t) :: d
    d = transfer(p, 0_tecore_devptr_t)
  end function tecore_f_devptr

  ! A character buffer filled by C (NUL-terminated) as a Fortran string.
  function tecore_f_string_buffer(b) result(s)
    character(kind=c_char), intent(in) :: b(:)
    character(len=:), allocatable :: s
    integer :: i, n
    n = 0
    do while (n < size(b))
      if (b(n + 1) == c_null_char) exit
      n = n + 1
    end do
    allocate(character(len=n) :: s)
    do i = 1, n
      s(i:i) = b(i)
    end do
  end function tecore_f_string_buffer
"""


def gen_wrapper(w, fname, rawname, ps, rt, ret_str, buf_at):
    dummies, decls, locs, pre, post, call = [], [], [], [], [], []
    skip = set()
    if buf_at is not None:
        skip.add(buf_at + 1)
        has_needed = buf_at + 2 < len(ps) and ps[buf_at + 2].decl.name == "needed"
        if has_needed:
            skip.add(buf_at + 2)
    for i, p in enumerate(ps):
        n = p.decl.name
        if i in skip:
            continue
        if i == buf_at:
            continue
        dummies.append(n)
        decls.append(p.wrap or p.raw)
        if p.wrap and p.wrap.startswith("character(len=*)"):
            locs.append("character(kind=c_char), allocatable, target :: %s_z(:)" % n)
        if p.call and p.call.endswith("_p"):
            locs.append("type(c_ptr) :: %s_p" % n)
        pre += p.pre
        post += p.post
    args = []
    for i, p in enumerate(ps):
        n = p.decl.name
        if i == buf_at:
            args.append("%s_b" % n)
        elif buf_at is not None and i == buf_at + 1:
            args.append("size(%s_b, kind=c_size_t)" % ps[buf_at].decl.name)
        elif buf_at is not None and i == buf_at + 2 and i in skip:
            args.append("%s_n" % n)
        else:
            args.append(p.call or n)
    if buf_at is not None:
        b = ps[buf_at].decl.name
        dummies.append(b)
        decls.append("character(len=:), allocatable, intent(out) :: %s" % b)
        locs.append("character(kind=c_char), allocatable :: %s_b(:)" % b)
        if buf_at + 2 in skip:
            nn = ps[buf_at + 2].decl.name
            locs.append("integer(c_size_t) :: %s_n" % nn)
    is_fn = rt is not None
    kw = "function" if is_fn else "subroutine"
    res = " result(te_res)" if is_fn else ""
    w("  %s %s(%s)%s" % (kw, fname, ", ".join(dummies), res))
    for d in decls:
        w("    " + d)
    if is_fn:
        w("    %s :: te_res" % ("character(len=:), allocatable" if ret_str else rt))
    for l in locs:
        w("    " + l)
    if ret_str:
        w("    type(c_ptr) :: te_rp")
    for s in pre:
        w("    " + s)
    callexpr = "%s(%s)" % (rawname, ", ".join(args))
    if buf_at is not None:
        b = ps[buf_at].decl.name
        if buf_at + 2 in skip:   # ask for the length, then fetch
            nn = ps[buf_at + 2].decl.name
            w("    allocate(%s_b(1))" % b)
            w("    %s_n = 0" % nn)
            w("    te_res = %s" % callexpr)
            w("    if (te_res /= 0) then")
            w("      %s = \"\"" % b)
            w("      return")
            w("    end if")
            w("    deallocate(%s_b)" % b)
            w("    allocate(%s_b(%s_n + 1))" % (b, nn))
        else:
            w("    allocate(%s_b(65536))" % b)
    if ret_str:
        w("    te_rp = " + callexpr)
        w("    te_res = tecore_f_string(te_rp)")
    elif is_fn:
        w("    te_res = " + callexpr)
    else:
        w("    call " + callexpr)
    if buf_at is not None:
        w("    %s = tecore_f_string_buffer(%s_b)" % (ps[buf_at].decl.name, ps[buf_at].decl.name))
    for s in post:
        w("    " + s)
    w("  end %s %s" % (kw, fname))
    w()


# ---- the layout check ------------------------------------------------------

def gen_layout(api):
    c = Writer(wrap=False)
    f = Writer()
    c("/* SPDX-License-Identifier: Apache-2.0")
    c(" * fortran_layout_c.c -- prints the size of every public struct and the offset")
    c(" * of each field; t/fortran/fortran-layout.sh compares it with fortran_layout_f.f90.")
    c(" * GENERATED by fortran/gen-fortran.py: do not edit. */")
    c("#include <stddef.h>")
    c("#include <stdio.h>")
    c("#include <te/core.h>")
    c("#include <te/graph.h>")
    c("#include <te/offload.h>")
    c("#include <te/comm.h>")
    c()
    c("int main(void) {")
    f("! SPDX-License-Identifier: Apache-2.0")
    f("! fortran_layout_f.f90 -- prints the size of every bind(C) type of the libte")
    f("! modules and the offset of each component; t/fortran/fortran-layout.sh compares it")
    f("! with fortran_layout_c.c.  GENERATED by fortran/gen-fortran.py: do not edit.")
    f("program fortran_layout")
    f("  use te_core")
    f("  use te_graph")
    f("  use te_comm")
    f("  implicit none")
    body = []
    for i, (hdr, sname, fields) in enumerate(api.structs):
        f("  type(%s), target :: v%d" % (sname, i))
        ctype = sname if sname[0].isupper() else "struct " + sname
        c("  printf(\"%s size %%zu\\n\", sizeof(%s));" % (sname, ctype))
        body.append("  print '(a,1x,i0)', '%s size', c_sizeof(v%d)" % (sname, i))
        for fl in fields:
            c("  printf(\"%s.%s %%zu\\n\", offsetof(%s, %s));" % (sname, fl.name, ctype, fl.name))
            body.append("  print '(a,1x,i0)', '%s.%s', off(c_loc(v%d), c_loc(v%d%%%s))"
                        % (sname, fl.name, i, i, fl.name))
    c("  return 0;")
    c("}")
    for b in body:
        f(b)
    f("contains")
    f("  integer(c_intptr_t) function off(a, b)")
    f("    type(c_ptr), intent(in) :: a, b")
    f("    off = transfer(b, 0_c_intptr_t) - transfer(a, 0_c_intptr_t)")
    f("  end function off")
    f("end program fortran_layout")
    return c.text(), f.text()


def gfortran_symbols(syms):
    """The ELF names gfortran gives what the modules define, sorted: a module
    procedure p of module m is __m_MOD_p, and each derived type T gets a
    copy routine, a default-initialization object and a vtab (for class(*)
    and intrinsic assignment in the caller's code) named after the module
    and T with its first letter capitalized.  fortran/libtefortran.map must
    list exactly these and the C doors of te_fortran.c (t/fortran/fortran-map.sh)."""
    out = []
    for kind, mod, name in syms:
        name = name.lower()
        if kind == "proc":
            out.append("__%s_MOD_%s" % (mod, name))
        else:
            t = "%s_%s" % (mod, name[:1].upper() + name[1:])
            out += ["__%s_MOD___%s_%s" % (mod, what, t) for what in ("copy", "def_init", "vtab")]
    return sorted(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--srcdir", default=os.path.dirname(here))
    ap.add_argument("--outdir", default=None, help="where to write (default: srcdir)")
    ap.add_argument("--cc", default=os.environ.get("CC", "cc"))
    ap.add_argument("--symbols", action="store_true",
                    help="print the gfortran symbol names of the modules, write nothing")
    a = ap.parse_args()
    outdir = a.outdir or a.srcdir
    api = read_api(a.srcdir, a.cc)
    for name in ARRAY_PARAMS:
        found = [p for _, r, ps, _, _ in api.funcs if r.name == name for p in ps]
        missing = ARRAY_PARAMS[name] - {p.name for p in found}
        if found and missing:
            die("ARRAY_PARAMS: %s has no parameter %s" % (name, ", ".join(sorted(missing))))
    out, syms = {}, []
    for mod, lib, prefix, uses in LIBS:
        out[os.path.join("fortran", mod + ".f90")] = gen_module(api, mod, lib, prefix, uses, syms)
    if a.symbols:
        sys.stdout.write("".join(n + "\n" for n in gfortran_symbols(syms)))
        return
    lc, lf = gen_layout(api)
    out[os.path.join("t", "fortran", "fortran_layout_c.c")] = lc
    out[os.path.join("t", "fortran", "fortran_layout_f.f90")] = lf
    for rel, text in out.items():
        path = os.path.join(outdir, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as fh:
            fh.write(text)


if __name__ == "__main__":
    main()

dnl SPDX-License-Identifier: Apache-2.0
dnl te_fortran.m4 -- TE_CHECK_FORTRAN: whether the Fortran modules can be
dnl built (the compiler AC_PROG_FC found compiles a module that uses
dnl iso_c_binding's c_sizeof, bind(C) types and optional arguments of bind(C)
dnl interfaces, NULL when absent: Fortran 2018's C interoperability, in
dnl gfortran since 4.9) and how to place and find .mod files.  Sets have_fortran, FC_MODOUT, FC_MODINC and
dnl the HAVE_FORTRAN conditional; TE_FORTRAN_MAP when the compiler names
dnl module symbols as gfortran does (fortran/libtefortran.map applies).  --with-fortran=yes makes a failure fatal.
AC_DEFUN([TE_CHECK_FORTRAN], [
  have_fortran=no
  fortran_gnu_names=no
  AS_IF([test "x$with_fortran" != xno && test -n "$FC"], [
    AC_LANG_PUSH([Fortran])
    AC_FC_SRCEXT([f90], [
      AC_MSG_CHECKING([whether $FC compiles bind(C) modules with optional arguments])
      AC_COMPILE_IFELSE([AC_LANG_SOURCE([[
module te_conftest
  use, intrinsic :: iso_c_binding
  implicit none
  type, bind(C) :: pair
    integer(c_int) :: a
    real(c_double) :: b
  end type pair
  interface
    integer(c_int) function takes_null(p) bind(C, name="takes_null")
      import :: c_int
      integer(c_int), optional :: p
    end function takes_null
  end interface
contains
  integer(c_size_t) function pair_bytes()
    type(pair) :: p
    pair_bytes = c_sizeof(p)
  end function pair_bytes
end module te_conftest
]])], [have_fortran=yes])
      AC_MSG_RESULT([$have_fortran])
      rm -f te_conftest.mod
    ])
    AS_IF([test "x$have_fortran" = xyes], [
      AC_FC_MODULE_OUTPUT_FLAG([], [have_fortran=no])
      AC_FC_MODULE_FLAG([], [have_fortran=no])
    ])
    dnl fortran/libtefortran.map lists gfortran's names for module procedures
    dnl and a type's helpers; another compiler's library goes without the map
    dnl (hiding every symbol would break it)
    AS_IF([test "x$have_fortran" = xyes], [
      AC_MSG_CHECKING([whether $FC names module symbols as gfortran does])
      AC_COMPILE_IFELSE([AC_LANG_SOURCE([[
module te_conftest
  use, intrinsic :: iso_c_binding
  implicit none
  type, bind(C) :: pair
    integer(c_int) :: a
  end type pair
contains
  integer(c_int) function pair_a(p)
    type(pair), intent(in) :: p
    pair_a = p%a
  end function pair_a
end module te_conftest
]])], [
        ${NM:-nm} conftest.$ac_objext > conftest.nm 2>/dev/null &&
          grep '__te_conftest_MOD_pair_a$' conftest.nm >/dev/null &&
          grep '__te_conftest_MOD___vtab_te_conftest_Pair$' conftest.nm >/dev/null &&
          fortran_gnu_names=yes
        rm -f conftest.nm])
      AC_MSG_RESULT([$fortran_gnu_names])
      rm -f te_conftest.mod
    ])
    AC_LANG_POP([Fortran])
  ])
  AS_IF([test "x$with_fortran" = xyes && test "x$have_fortran" != xyes],
    [AC_MSG_ERROR([--with-fortran: no Fortran compiler with Fortran 2018 C interoperability and module flags found (FC=$FC)])])
  AC_SUBST([FC_MODOUT])
  AC_SUBST([FC_MODINC])
  AM_CONDITIONAL([HAVE_FORTRAN], [test "x$have_fortran" = xyes])
  AM_CONDITIONAL([TE_FORTRAN_MAP], [test "x$fortran_gnu_names" = xyes])
])

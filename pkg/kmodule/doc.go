// Package kmodule reads, signs and verifies Linux kernel module files
// (.ko) the way the kernel's own tools define them: the .modinfo section
// modinfo prints (include/linux/moduleparam.h's MODULE_INFO, key=value
// strings each ended by a NUL), and the signature scripts/sign-file appends
// and the module loader checks (kernel/module/signing.c,
// include/linux/module_signature.h, Documentation/admin-guide/
// module-signing.rst): the module's bytes, a detached PKCS#7 (CMS)
// SignedData over them, a 12-byte struct module_signature and the marker
// "~Module signature appended~\n".
//
// kubectl tt uses it on the operator's machine to check and sign a module a
// node built; the node agent uses it to check a module before it loads it.
// It is pure Go on bytes: no kmod, no OpenSSL.
package kmodule

# Run at install time (python/CMakeLists.txt): copies kvq's libraries from KVQ_LIB_DIR (a build's
# lib/) into KVQ_DEST (the wheel's kvq/lib), each shared library once, as a plain file named by
# its SONAME (a wheel is a zip: symbolic links would become copies), plus the libraries they need
# that the system does not bring everywhere (spdlog, fmt, yaml-cpp from the build machine).
# kvq's own RPATHs ($ORIGIN/../lib for libraries, $ORIGIN/../.. for plugins) find them there.
file(MAKE_DIRECTORY "${KVQ_DEST}/kvq/plugins")

function(kvq_bundle_copy src dest_dir)
  get_filename_component(name "${src}" NAME)
  file(REAL_PATH "${src}" real)
  file(COPY_FILE "${real}" "${dest_dir}/${name}" ONLY_IF_DIFFERENT)
  message(STATUS "kvq python: ${dest_dir}/${name}")
endfunction()

file(GLOB sonames "${KVQ_LIB_DIR}/libkvq_*.so.[0-9]*")
list(FILTER sonames INCLUDE REGEX "\\.so\\.[0-9]+$")  # libkvq_core.so.0, not .so.0.1.0
file(GLOB plugins "${KVQ_LIB_DIR}/kvq/plugins/libkvq_*.so")
set(capi "${KVQ_LIB_DIR}/libkvq_capi.so")
foreach(f ${capi} ${sonames})
  kvq_bundle_copy("${f}" "${KVQ_DEST}")
endforeach()
foreach(f ${plugins})
  kvq_bundle_copy("${f}" "${KVQ_DEST}/kvq/plugins")
endforeach()

# What they link beyond kvq itself, glibc, GCC's runtime and the CUDA driver.
file(GET_RUNTIME_DEPENDENCIES
  LIBRARIES ${capi} ${sonames}
  MODULES ${plugins}
  DIRECTORIES "${KVQ_LIB_DIR}"
  RESOLVED_DEPENDENCIES_VAR deps
  UNRESOLVED_DEPENDENCIES_VAR missing
  PRE_EXCLUDE_REGEXES
    "^libkvq_" "^ld-linux" "^libc\\.so" "^libm\\.so" "^libdl\\.so" "^libpthread\\.so"
    "^librt\\.so" "^libstdc\\+\\+\\.so" "^libgcc_s\\.so" "^libcuda\\.so" "^linux-vdso")
if(missing)
  message(FATAL_ERROR "kvq python: libraries not found for the wheel: ${missing}")
endif()
foreach(f ${deps})
  kvq_bundle_copy("${f}" "${KVQ_DEST}")
endforeach()

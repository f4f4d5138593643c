# DLFUSE_SANITIZE applies to every target, plugins included, so a plugin's bug
# shows up in the same run as the registry's.
if(DLFUSE_SANITIZE)
  string(REPLACE ";" "," _dlfuse_san "${DLFUSE_SANITIZE}")
  add_compile_options(-fsanitize=${_dlfuse_san} -fno-omit-frame-pointer -fno-sanitize-recover=all -g)
  add_link_options(-fsanitize=${_dlfuse_san})
endif()

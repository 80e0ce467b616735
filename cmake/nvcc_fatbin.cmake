# Makes the GPU kernels' fatbin, once per content. nvcc takes about 100 s
# for the architectures libccl embeds, and every build directory makes the
# same bytes from the same sources whatever its C compiler or sanitizer
# (CI builds four). So the fatbin is kept in a cache, named by the SHA-256
# of the sources, of the nvcc command line and of nvcc's version: a hit is
# copied, a miss is built (the architectures compiled in parallel) and
# stored.
#
# The cache: CCL_FATBIN_CACHE (a directory; 0 or off: no cache), else
# $XDG_CACHE_HOME/libccl/fatbin, else ~/.cache/libccl/fatbin.
#
# cmake -DNVCC=... -DOUT=... -DSOURCES="a.cu|b.h|..." -DINCLUDE=... -DGENCODE="-gencode|...|..."
#       -P nvcc_fatbin.cmake        (SOURCES: the first is compiled, every one is hashed)
string(REPLACE "|" ";" sources "${SOURCES}")
string(REPLACE "|" ";" gencode "${GENCODE}")
list(GET sources 0 main)
set(command ${NVCC} --fatbin --threads 0 -O3 -I${INCLUDE} ${gencode})

set(cache "$ENV{CCL_FATBIN_CACHE}")
if(cache STREQUAL "0" OR cache STREQUAL "off")
  set(cache "")
elseif(cache STREQUAL "")
  if(NOT "$ENV{XDG_CACHE_HOME}" STREQUAL "")
    set(cache "$ENV{XDG_CACHE_HOME}/libccl/fatbin")
  elseif(NOT "$ENV{HOME}" STREQUAL "")
    set(cache "$ENV{HOME}/.cache/libccl/fatbin")
  endif()
endif()

set(key "")
if(cache)
  execute_process(COMMAND ${NVCC} --version OUTPUT_VARIABLE version RESULT_VARIABLE rc)
  if(rc EQUAL 0)
    set(text "${command}\n${version}\n")
    foreach(f ${sources})
      file(SHA256 ${f} h)
      string(APPEND text "${h}\n")
    endforeach()
    string(SHA256 key "${text}")
  endif()
endif()

if(key AND EXISTS ${cache}/${key}.fatbin)
  execute_process(COMMAND ${CMAKE_COMMAND} -E copy ${cache}/${key}.fatbin ${OUT} RESULT_VARIABLE rc)
  if(rc EQUAL 0)
    message(STATUS "GPU kernels: ${cache}/${key}.fatbin (cached)")
    return()
  endif()
endif()

execute_process(COMMAND ${command} -o ${OUT}.tmp ${main} RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  file(REMOVE ${OUT}.tmp)
  message(FATAL_ERROR "nvcc failed (${rc}) on ${main}")
endif()
file(RENAME ${OUT}.tmp ${OUT})
if(key)
  # Written aside, then renamed: a build beside this one reads a whole
  # file or none. A cache that cannot be written costs nothing but time.
  execute_process(COMMAND ${CMAKE_COMMAND} -E make_directory ${cache} RESULT_VARIABLE made)
  string(RANDOM LENGTH 8 tag)
  set(copied 1)
  if(made EQUAL 0)
    execute_process(COMMAND ${CMAKE_COMMAND} -E copy ${OUT} ${cache}/${key}.${tag} RESULT_VARIABLE copied)
  endif()
  if(copied EQUAL 0)
    execute_process(COMMAND ${CMAKE_COMMAND} -E rename ${cache}/${key}.${tag} ${cache}/${key}.fatbin
                    RESULT_VARIABLE renamed)
  endif()
  file(REMOVE ${cache}/${key}.${tag})
endif()

# ctest script (cmake -P): the CUDA plugin holds device code of every real architecture it was configured for, and of
# sm_90 when the architectures were left to the build's default.  Catches a build whose kernels would only run through the
# driver's compilation of old PTX at load time (the fate of every build before bench/NOTES.md v12).
#   -DPLUGIN=<libOpenMMGraphCUDA.so> -DCUOBJDUMP=<cuobjdump> -DARCHITECTURES=<CMAKE_CUDA_ARCHITECTURES> -DDEFAULT=<ON|OFF>
execute_process(COMMAND "${CUOBJDUMP}" --list-elf "${PLUGIN}" OUTPUT_VARIABLE listing ERROR_VARIABLE errors RESULT_VARIABLE result)
if(NOT result EQUAL 0)
    message(FATAL_ERROR "cuobjdump --list-elf ${PLUGIN} failed (${result}): ${errors}")
endif()
set(expected "")
foreach(arch ${ARCHITECTURES})
    if(arch MATCHES "^([0-9]+[a-z]?)(-real)?$") # 90, 90a, 90-real; not 90-virtual (PTX only), native or all
        list(APPEND expected "sm_${CMAKE_MATCH_1}")
    endif()
endforeach()
if(DEFAULT)
    list(APPEND expected "sm_90")
endif()
list(REMOVE_DUPLICATES expected)
foreach(sm ${expected})
    if(NOT listing MATCHES "\\.${sm}\\.cubin")
        message(FATAL_ERROR "${PLUGIN} has no ${sm} device code (configured architectures: ${ARCHITECTURES}); found:\n${listing}")
    endif()
endforeach()
message(STATUS "device code for ${expected}:\n${listing}")

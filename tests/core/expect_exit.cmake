# cmake -DKVQ=... -DCONFIG=... -DEXPECT_STATUS=N -DEXPECT_STDERR=regex [-DEXPECT_STDOUT=regex]
#       -P expect_exit.cmake
# Runs `kvq check CONFIG` and checks its exit status, that stderr is at most ONE line matching the
# regex, and stdout against EXPECT_STDOUT when given.
execute_process(COMMAND ${KVQ} check ${CONFIG} RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT status EQUAL EXPECT_STATUS)
  message(FATAL_ERROR "kvq check ${CONFIG}: exit ${status}, expected ${EXPECT_STATUS}\nstdout: ${out}\nstderr: ${err}")
endif()
if(NOT err MATCHES "${EXPECT_STDERR}")
  message(FATAL_ERROR "stderr does not match '${EXPECT_STDERR}':\n${err}")
endif()
string(STRIP "${err}" stripped)
string(FIND "${stripped}" "\n" newline)
if(NOT newline EQUAL -1)
  message(FATAL_ERROR "stderr has more than one line:\n${err}")
endif()
if(DEFINED EXPECT_STDOUT AND NOT out MATCHES "${EXPECT_STDOUT}")
  message(FATAL_ERROR "stdout does not match '${EXPECT_STDOUT}':\n${out}")
endif()

# write_if_changed(PATH TEXT): writes TEXT to PATH unless PATH already holds it, so a generated
# source that did not change keeps its time stamp and rebuilds nothing.
function(write_if_changed path text)
  if(EXISTS "${path}")
    file(READ "${path}" old)
    if(old STREQUAL text)
      return()
    endif()
  endif()
  file(WRITE "${path}" "${text}")
endfunction()

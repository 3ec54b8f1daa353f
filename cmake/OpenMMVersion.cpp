// Prints the version of the OpenMM library it is linked against (configure-time check).
#include "OpenMM.h"
#include <iostream>
int main() {
    std::cout << OpenMM::Platform::getOpenMMVersion() << std::endl;
    return 0;
}

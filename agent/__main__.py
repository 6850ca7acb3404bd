from agent.host import main

main()
